#!/usr/bin/env bash
# The GPU machine's copy of the working tree travels with the carried archives under a 64 MiB
# limit (tracked files and untracked ones git does not ignore, plus `carry` paths), and the tree
# with models/qwen36-tiny (42 MB) and tests/data (19 MB) is most of it. This moves what a device run
# does not need out of the tree, into .device-hold/ (git-ignored), and back.
# Usage: bash scripts/device_trim.sh gpu-tests   keep models/qwen36-tiny and the test data the GPU
#                                                tests open (parity, image, vision, vision_parity,
#                                                quant/ct_int4, modelopt_nvfp4, ct_nvfp4): about 61 MB, so carry only qs_gpu_tests
#        bash scripts/device_trim.sh packed      keep models/qwen36-tiny and tests/data's small folders; hold
#                                                out its large ones (~18 MB), and pack the GPU tests' data
#                                                among them (what gpu-tests keeps) into
#                                                .carry/test-data.tar.xz (~4.5 MB), which gpu_run.sh unpacks into
#                                                tests/data on the device: the whole GPU suite beside a full
#                                                gpu-bundle (~11 MB) in one call (carry [".carry"])
#        bash scripts/device_trim.sh bench       keep neither (benchmarks, labs, HTTP runs)
#        bash scripts/device_trim.sh restore     put everything back (run it before building or testing here)
#        bash scripts/device_trim.sh status      what is held out, and the bytes the tree now carries
set -euo pipefail
cd "$(dirname "$0")/.."
hold=.device-hold
carried_bytes() {
    local tree carry=0
    # Tracked files held out are still listed by git: stat skips them (its failure is expected).
    tree=$(set +o pipefail; git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
           awk '{ s += $1 } END { print s + 0 }')
    if [ -d .carry ]; then carry=$(du -cb .carry | tail -1 | cut -f1); fi
    echo "tree $tree bytes + .carry $carry bytes = $((tree + carry)) of 67108864 (64 MiB)"
    if [ $((tree + carry)) -gt 67108864 ]; then echo "device_trim: over the device's carry limit" >&2; fi
}
hold_out() {  # path...
    for p in "$@"; do
        [ -e "$p" ] || continue
        mkdir -p "$hold/$(dirname "$p")"
        mv "$p" "$hold/$p"
    done
}
gpu_test_data=(parity image vision vision_parity quant/ct_int4 quant/modelopt_nvfp4 quant/ct_nvfp4)
case "${1:-}" in
    packed)
        if [ -d "$hold" ] && [ -n "$(ls -A "$hold")" ]; then
            echo "device_trim: $hold/ already holds files; run 'restore' first" >&2
            exit 1
        fi
        mkdir -p .carry
        tar -C tests/data -cJf .carry/test-data.tar.xz "${gpu_test_data[@]}"
        for d in parity image vision vision_parity quant tokenizer video video_file; do hold_out "tests/data/$d"; done
        carried_bytes
        ;;
    gpu-tests | bench)
        if [ -d "$hold" ] && [ -n "$(ls -A "$hold")" ]; then
            echo "device_trim: $hold/ already holds files; run 'restore' first" >&2
            exit 1
        fi
        keep=()
        [ "$1" = gpu-tests ] && keep=(parity image vision vision_parity quant)
        for d in tests/data/*; do
            name=$(basename "$d")
            if [[ " ${keep[*]} " == *" $name "* ]]; then continue; fi
            hold_out "$d"
        done
        if [ "$1" = gpu-tests ]; then
            for q in tests/data/quant/*; do
                case "$(basename "$q")" in ct_int4 | modelopt_nvfp4 | ct_nvfp4) ;; *) hold_out "$q" ;; esac
            done
        else
            hold_out models/qwen36-tiny
        fi
        carried_bytes
        ;;
    restore)
        if [ -d "$hold" ]; then
            (cd "$hold" && find . -type f -print0) | while IFS= read -r -d '' f; do
                f=${f#./}
                if [ -e "$f" ]; then
                    echo "device_trim: $f is both in the tree and in $hold/; kept both" >&2
                    continue
                fi
                mkdir -p "$(dirname "$f")"
                mv "$hold/$f" "$f"
            done
            find "$hold" -depth -type d -empty -delete
        fi
        git status --short -- tests/data models | head -5
        carried_bytes
        ;;
    status)
        [ -d "$hold" ] && find "$hold" -mindepth 1 -maxdepth 3 | head -40
        carried_bytes
        ;;
    *)
        echo "usage: bash scripts/device_trim.sh gpu-tests|packed|bench|restore|status" >&2
        exit 2
        ;;
esac
