#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (bench/README.md).
#   bash scripts/lent_gpu.sh pack   here: builds `stepscope` and the native GPU
#                                   test binaries (release), packs them with
#                                   Debian's Vulkan loader into devicebin/
#   bash scripts/lent_gpu.sh run    there (devicebin/ carried): the
#                                   transformer's and conv nets' GPU
#                                   sections first ($OUT/gpt-gpu.md: issue
#                                   27's 10x goal; $OUT/conv.md: issue 42's
#                                   20x at the CIFAR-sized net, batch 256),
#                                   every GPU test against its CPU twin, then
#                                   the whole `stepscope bench` ($OUT/h200.md);
#                                   after the GPU section, the CPU's ranks:
#                                   the 0.8 M transformer in 12 shards on
#                                   1, 2, 4, 6, 12 threads ($OUT/ranks.txt), and
#                                   `stepscope bench --only ranks` ($OUT/ranks.md)
set -euo pipefail
cd "$(dirname "$0")/.."
tests=(gpu_backward gpu_conv gpu_conv_training gpu_dense_forward gpu_fused gpu_gpt gpu_gpt_training
  gpu_matmul_variants gpu_misc gpu_optim
  gpu_optim_adaptive gpu_training)
D=$PWD/devicebin

if [ "${1:-}" = pack ]; then
  cargo build --release -p stepscope-cli
  cargo build --release -p stepscope-core --example gpt_step_bench
  cargo test --release -p stepscope-core --no-run "${tests[@]/#/--test=}"
  rm -rf "$D" && mkdir -p "$D/bin" "$D/lib"
  cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$D/lib/"
  cp target/release/stepscope "$D/bin/"
  cp target/release/examples/gpt_step_bench "$D/bin/"
  for t in "${tests[@]}"; do
    cp "$(ls -t target/release/deps/"$t"-* | grep -v '\.d$' | head -1)" "$D/bin/$t"
  done
  strip "$D"/bin/*
  (cd "$D" && tar cJf bins.tar.xz bin && rm -rf bin)
  exit 0
fi

set +e
(cd "$D" && tar xJf bins.tar.xz)
# The machine has the NVIDIA driver but no Vulkan loader, and the driver's
# GLX-based ICD will not start headless: the EGL library carries the same
# Vulkan entry points.
echo '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}' > /tmp/nv.json
export LD_LIBRARY_PATH=$D/lib VK_ICD_FILENAMES=/tmp/nv.json WGPU_BACKEND=vulkan
nvidia-smi -L 2>&1 | tee "$OUT/gpu.txt"
# The tests find their fixtures through the path they were built in.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
start=$(date +%s)
# What a short lend must not miss comes first: the transformer's GPU
# tokens/s beside the CPU engine's, then the twins, then the rest.
timeout 150 "$D/bin/stepscope" bench --only gpt-gpu --out "$OUT/gpt-gpu.md" > "$OUT/gpt-gpu.log" 2>&1
echo "gpt-gpu rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/gpt-gpu.log"
# Conv nets: GPU against CPU images/s, both conv variants against the FMA probe
# and the calibration's pick (about 2 minutes on lavapipe; far less on a GPU).
timeout 180 "$D/bin/stepscope" bench --only conv --out "$OUT/conv.md" > "$OUT/conv.log" 2>&1
echo "conv rc=$? at $(( $(date +%s) - start )) s" | tee -a "$OUT/conv.log"
# The CPU's scaling over ranks (issue 40): the same bits on every line.
for r in 1 2 4 6 12; do
  timeout 30 "$D/bin/gpt_step_bench" 4 4 128 64 12 4 0 12 "$r"
done > "$OUT/ranks.txt" 2>&1
echo "ranks done at $(( $(date +%s) - start )) s" | tee -a "$OUT/ranks.txt"
# The MLPs W2, W3 and the 0.8 M transformer on 1, 2, 4, 8, 16 threads.
timeout 150 "$D/bin/stepscope" bench --only ranks --out "$OUT/ranks.md" > "$OUT/ranks-bench.log" 2>&1
echo "bench ranks rc=$? at $(( $(date +%s) - start )) s" | tee -a "$OUT/ranks-bench.log"
for t in "${tests[@]}"; do
  echo "== $t"
  (cd core && timeout 120 "$D/bin/$t" --test-threads=8 2>&1 | grep -E "^test result|FAILED|panicked" | head -20)
done 2>&1 | tee "$OUT/tests.log"
echo "tests done at $(( $(date +%s) - start )) s" | tee -a "$OUT/tests.log"
timeout 240 "$D/bin/stepscope" bench --out "$OUT/h200.md" > "$OUT/bench.log" 2>&1
echo "bench rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/bench.log"
echo "all done in $(( $(date +%s) - start )) s"
