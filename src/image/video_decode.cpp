// Video files → RGB frames with libavformat/libavcodec/libswscale (see video_decode.h).
#include "image/video_decode.h"

#include <fmt/format.h>

#if QS_HAVE_LIBAV
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}
#include <algorithm>
#include <cstring>
#include <memory>
#endif

namespace qs {

#if !QS_HAVE_LIBAV

bool video_files_supported() { return false; }

Result<DecodedVideo> decode_video(std::string_view, const PickFrames&, const VideoDecodeLimits&) {
    return invalid_argument("video files need a build with libavcodec (this server was built without it: install "
                            "libavformat-dev libavcodec-dev libswscale-dev libavutil-dev and rebuild); send the "
                            "frames as a list, data:video/jpeg;base64,<frame>,<frame>,...");
}

#else

namespace {

std::string av_message(int err) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {};
    av_strerror(err, buf, sizeof(buf));
    return buf;
}

// The bytes as an AVIOContext: read and seek over memory.
struct MemoryReader {
    std::string_view bytes;
    int64_t pos = 0;

    static int read(void* opaque, uint8_t* buf, int size) {
        auto* r = static_cast<MemoryReader*>(opaque);
        const int64_t left = int64_t(r->bytes.size()) - r->pos;
        if (left <= 0) return AVERROR_EOF;
        const int n = int(std::min<int64_t>(left, size));
        std::memcpy(buf, r->bytes.data() + r->pos, size_t(n));
        r->pos += n;
        return n;
    }
    static int64_t seek(void* opaque, int64_t offset, int whence) {
        auto* r = static_cast<MemoryReader*>(opaque);
        const int64_t size = int64_t(r->bytes.size());
        if (whence & AVSEEK_SIZE) return size;
        int64_t to = offset;
        switch (whence & ~AVSEEK_FORCE) {
            case SEEK_SET: break;
            case SEEK_CUR: to = r->pos + offset; break;
            case SEEK_END: to = size + offset; break;
            default: return -1;
        }
        if (to < 0 || to > size) return -1;
        r->pos = to;
        return to;
    }
};

struct Demuxer {
    MemoryReader reader;
    AVIOContext* io = nullptr;
    AVFormatContext* fmt = nullptr;
    AVCodecContext* dec = nullptr;
    AVPacket* pkt = nullptr;
    AVFrame* frame = nullptr;
    SwsContext* sws = nullptr;
    ~Demuxer() {
        sws_freeContext(sws);
        av_frame_free(&frame);
        av_packet_free(&pkt);
        avcodec_free_context(&dec);
        avformat_close_input(&fmt);
        if (io) av_freep(&io->buffer);
        avio_context_free(&io);
    }
};

Status fail(const std::string& what) { return invalid_argument(what); }

// Opens the container and the first video stream's decoder.
Result<int> open(Demuxer& d, std::string_view bytes) {
    d.reader.bytes = bytes;
    constexpr int kBuf = 1 << 16;
    auto* buf = static_cast<uint8_t*>(av_malloc(kBuf));
    if (!buf) return internal_error("out of memory opening the video");
    d.io = avio_alloc_context(buf, kBuf, 0, &d.reader, &MemoryReader::read, nullptr, &MemoryReader::seek);
    if (!d.io) {
        av_free(buf);
        return internal_error("out of memory opening the video");
    }
    d.fmt = avformat_alloc_context();
    d.fmt->pb = d.io;
    d.fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    if (int e = avformat_open_input(&d.fmt, nullptr, nullptr, nullptr); e < 0)
        return fail(fmt::format("not a video file this server can read ({})", av_message(e)));
    if (int e = avformat_find_stream_info(d.fmt, nullptr); e < 0)
        return fail(fmt::format("the video's streams cannot be read ({})", av_message(e)));
    const AVCodec* codec = nullptr;
    const int si = av_find_best_stream(d.fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si == AVERROR_STREAM_NOT_FOUND) return fail("the file has no video stream");
    if (si == AVERROR_DECODER_NOT_FOUND || !codec) {
        const AVCodecDescriptor* desc =
            si >= 0 ? avcodec_descriptor_get(d.fmt->streams[si]->codecpar->codec_id) : nullptr;
        return fail(fmt::format("the video's codec {} is not supported by this build's libavcodec",
                                desc ? desc->name : "(unknown)"));
    }
    if (si < 0) return fail(fmt::format("the video stream cannot be opened ({})", av_message(si)));
    d.dec = avcodec_alloc_context3(codec);
    if (!d.dec) return internal_error("out of memory opening the video decoder");
    if (int e = avcodec_parameters_to_context(d.dec, d.fmt->streams[si]->codecpar); e < 0)
        return fail(fmt::format("the video decoder cannot be set up ({})", av_message(e)));
    d.dec->thread_count = 1;  // one request, one worker thread: the worker pool is the parallelism
    if (int e = avcodec_open2(d.dec, codec, nullptr); e < 0)
        return fail(fmt::format("the video decoder for {} cannot be opened ({})", codec->name, av_message(e)));
    d.pkt = av_packet_alloc();
    d.frame = av_frame_alloc();
    if (!d.pkt || !d.frame) return internal_error("out of memory decoding the video");
    return si;
}

// libswscale to RGB24 as PyAV's VideoFrame.to_ndarray(format="rgb24"): same size, SWS_BILINEAR,
// the frame's colour matrix (BT.601 when unspecified) and range, full-range RGB out.
Result<RgbImage> to_rgb(Demuxer& d, const AVFrame* f) {
    d.sws = sws_getCachedContext(d.sws, f->width, f->height, AVPixelFormat(f->format), f->width, f->height,
                                 AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
    if (!d.sws)
        return fail(fmt::format("the video's pixel format {} cannot be converted to RGB",
                                av_get_pix_fmt_name(AVPixelFormat(f->format)) ? av_get_pix_fmt_name(AVPixelFormat(f->format)) : "?"));
    int cs = SWS_CS_DEFAULT;
    switch (f->colorspace) {
        case AVCOL_SPC_BT709: cs = SWS_CS_ITU709; break;
        case AVCOL_SPC_FCC: cs = SWS_CS_FCC; break;
        case AVCOL_SPC_SMPTE240M: cs = SWS_CS_SMPTE240M; break;
        case AVCOL_SPC_BT2020_NCL:
        case AVCOL_SPC_BT2020_CL: cs = SWS_CS_BT2020; break;
        default: break;
    }
    const int* coeffs = sws_getCoefficients(cs);
    const int src_full = f->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
    sws_setColorspaceDetails(d.sws, coeffs, src_full, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    RgbImage out;
    out.width = f->width;
    out.height = f->height;
    out.rgb.resize(size_t(f->width) * size_t(f->height) * 3);
    uint8_t* dst[4] = {out.rgb.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {f->width * 3, 0, 0, 0};
    if (sws_scale(d.sws, f->data, f->linesize, 0, f->height, dst, dst_stride) != f->height)
        return fail("the video frame could not be converted to RGB");
    return out;
}

}  // namespace

bool video_files_supported() { return true; }

Result<DecodedVideo> decode_video(std::string_view bytes, const PickFrames& pick, const VideoDecodeLimits& limits) {
    av_log_set_level(AV_LOG_QUIET);  // errors come back as Status; libav's own log would go to stderr
    Demuxer d;
    QS_ASSIGN_OR_RETURN(const int si, open(d, bytes));
    AVStream* st = d.fmt->streams[si];
    DecodedVideo out;
    VideoStreamInfo& info = out.info;
    info.width = d.dec->width;
    info.height = d.dec->height;
    info.container = d.fmt->iformat->name;
    info.codec = d.dec->codec->name;
    if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) info.fps = av_q2d(st->avg_frame_rate);
    if (info.width <= 0 || info.height <= 0) return fail("the video stream has no frame size");
    if (int64_t(info.width) * info.height > limits.max_pixels)
        return fail(fmt::format("the video's frames are {}x{} = {} pixels; at most {} are allowed (--max-image-pixels)",
                                info.width, info.height, int64_t(info.width) * info.height, limits.max_pixels));
    info.total_frames = st->nb_frames;
    if (info.total_frames <= 0) {
        // webm, mkv: no frame count in the header. Count the stream's packets (one per frame),
        // then go back to the start.
        int64_t n = 0;
        while (av_read_frame(d.fmt, d.pkt) >= 0) {
            n += d.pkt->stream_index == si;
            av_packet_unref(d.pkt);
        }
        info.total_frames = n;
        if (av_seek_frame(d.fmt, si, INT64_MIN, AVSEEK_FLAG_BACKWARD) < 0 &&
            avformat_seek_file(d.fmt, -1, INT64_MIN, 0, INT64_MAX, 0) < 0)
            return fail("the video cannot be rewound after counting its frames");
        avcodec_flush_buffers(d.dec);
    }
    if (info.total_frames <= 0) return fail("the video stream has no frames");
    QS_ASSIGN_OR_RETURN(out.indices, pick(info));
    if (out.indices.empty()) return fail("no frames were picked from the video");
    if (int64_t(out.indices.size()) > limits.max_frames)
        return fail(fmt::format("{} frames would be taken from the video; at most {} are allowed (--max-video-frames)",
                                out.indices.size(), limits.max_frames));
    for (size_t k = 0; k < out.indices.size(); ++k)
        if (out.indices[k] < 0 || out.indices[k] >= info.total_frames || (k > 0 && out.indices[k] < out.indices[k - 1]))
            return internal_error("decode_video: frame indices must be ascending and within the video");
    // Decode in order; convert the picked frames (an index may repeat).
    int64_t index = 0;
    size_t next = 0;
    auto take = [&]() -> Status {
        while (next < out.indices.size() && out.indices[next] == index) {
            if (d.frame->width != info.width || d.frame->height != info.height)
                return fail(fmt::format("video frame {} is {}x{} but the stream is {}x{}; frames must have one size",
                                        index, d.frame->width, d.frame->height, info.width, info.height));
            QS_ASSIGN_OR_RETURN(RgbImage rgb, to_rgb(d, d.frame));
            out.frames.push_back(std::move(rgb));
            ++next;
        }
        ++index;
        return Status::ok();
    };
    auto drain = [&]() -> Status {
        for (;;) {
            const int e = avcodec_receive_frame(d.dec, d.frame);
            if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return Status::ok();
            if (e < 0) return fail(fmt::format("video frame {} cannot be decoded ({})", index, av_message(e)));
            Status s = take();
            av_frame_unref(d.frame);
            QS_RETURN_IF_ERROR(s);
            if (next == out.indices.size()) return Status::ok();
        }
    };
    while (next < out.indices.size()) {
        const int r = av_read_frame(d.fmt, d.pkt);
        if (r == AVERROR_EOF) break;
        if (r < 0) return fail(fmt::format("the video is corrupt after frame {} ({})", index, av_message(r)));
        if (d.pkt->stream_index != si) {
            av_packet_unref(d.pkt);
            continue;
        }
        const int e = avcodec_send_packet(d.dec, d.pkt);
        av_packet_unref(d.pkt);
        if (e < 0 && e != AVERROR(EAGAIN))
            return fail(fmt::format("video frame {} cannot be decoded ({})", index, av_message(e)));
        QS_RETURN_IF_ERROR(drain());
    }
    if (next < out.indices.size()) {
        avcodec_send_packet(d.dec, nullptr);  // flush the decoder's delayed frames
        QS_RETURN_IF_ERROR(drain());
    }
    if (next < out.indices.size())
        return fail(fmt::format("the video's header says {} frames but only {} could be decoded", info.total_frames,
                                index));
    return out;
}

#endif

}  // namespace qs
