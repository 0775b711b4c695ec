# Sourced by the GPU serving scripts (gpu_serve_bench.sh, gpu_long_context.sh): starts
# `qwenserve serve --device cuda` on the full-size model with dummy weights, FP8 lean (fp8 block
# weights, bf16 GDN state, fp8 K/V), and waits until /health answers.
# Needs B (the bundle folder), port and fx (a scratch folder for serve.log) set by the caller.

# The carried bundle and tokenizer, unpacked when only their archives travelled.
gpu_serve_unpack() {
    if [ -f .carry/gpu-bundle.tar.xz ] && [ ! -x "$B/qwenserve" ]; then mkdir -p "$B" && tar -C "$B" -xJf .carry/gpu-bundle.tar.xz; fi
    [ -f .carry/qwen36-tok/tokenizer.json ] || { mkdir -p .carry/qwen36-tok && tar -C .carry/qwen36-tok -xJf .carry/qwen36-tok.tar.xz; }
    export LD_LIBRARY_PATH="$PWD/$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}

# gpu_serve_start EXTRA_ARGS...: sets $server (the pid) and $up_after (seconds to healthy);
# exits the script when serve dies first.
gpu_serve_start() {
    "$B/qwenserve" serve --model builtin:qwen36-35b-a3b --load-format dummy --dummy-format fp8-block \
        --gdn-state-dtype bf16 --kv-cache-dtype fp8_e4m3 --device cuda --tokenizer .carry/qwen36-tok \
        --served-model-name qwen3.6-35b-a3b --port "$port" "$@" > "$fx/serve.log" 2>&1 &
    server=$!
    for up_after in $(seq 1 240); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
        kill -0 $server 2>/dev/null || { echo "serve exited"; tail -20 "$fx/serve.log"; exit 1; }
        sleep 1
    done
    echo "serve did not become healthy in 240 s"; tail -20 "$fx/serve.log"; exit 1
}
