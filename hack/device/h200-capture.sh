#!/usr/bin/env bash
# Captures, on a machine with a real NVIDIA GPU, what dra-fake simulates: nvidia-smi's text, XML
# and MIG views, its errors and exit codes, and the answers of NVIDIA's NVML library to
# hack/nvml/probe.py, gpustat, nvitop and a go-nvml program. With DRA_FAKE_NVML=<dir> (dra-fake's
# libnvidia-ml.so.1 and nvidia-smi, and the device files they read) the same probes run against
# dra-fake too. Read-only: nothing here changes the GPU's settings.
#
#   hack/device/h200-capture.sh OUTDIR      (wheels in .whl/, the go-nvml program in .devbin/)
set -u
out=${1:?output directory}
mkdir -p "$out/smi" "$out/nvml"
run() { # name, command...: the command line, its merged output, its exit code (as the captures)
  local name=$1; shift
  { echo "\$ $*"; timeout 30 "$@" 2>&1; echo "rc=$?"; } >"$out/smi/$name.txt"
}
run q nvidia-smi -q
run qx nvidia-smi -q -x
run qi0 nvidia-smi -q -i 0
for d in MEMORY UTILIZATION ECC TEMPERATURE POWER CLOCK COMPUTE PIDS PERFORMANCE SUPPORTED_CLOCKS \
  PAGE_RETIREMENT ACCOUNTING ENCODER_STATS SUPPORTED_GPU_TARGET_TEMP VOLTAGE FBC_STATS ROW_REMAPPER \
  RESET_STATUS GSP_FIRMWARE_VERSION POWER_SMOOTHING POWER_PROFILES; do
  run "qd-$d" nvidia-smi -q -d "$d"
done
run qd-combined nvidia-smi -q -d MEMORY,ECC,POWER
run qd-bogus nvidia-smi -q -d BOGUS
run qd-x nvidia-smi -q -d MEMORY -x
run qx-i0 nvidia-smi -q -x -i 0
run qi-bad nvidia-smi -q -i 7
run qi-uuid-bad nvidia-smi -q -i GPU-00000000-0000-0000-0000-000000000000
run L-i0 nvidia-smi -L -i 0
run list-gpus nvidia-smi --list-gpus
run help-apps nvidia-smi --help-query-compute-apps
run help-retired nvidia-smi --help-query-retired-pages
run help-remapped nvidia-smi --help-query-remapped-rows
run help-clocks nvidia-smi --help-query-supported-clocks
run query-clocks nvidia-smi --query-supported-clocks=timestamp,gpu_name,gpu_bus_id,gpu_uuid,memory,graphics --format=csv
run query-retired nvidia-smi --query-retired-pages=gpu_uuid,retired_pages.address,retired_pages.cause --format=csv
run query-remapped nvidia-smi --query-remapped-rows=gpu_bus_id,gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv
run query-empty nvidia-smi --query-gpu= --format=csv
run query-noquery nvidia-smi --format=csv
run query-twobad nvidia-smi --query-gpu=name,bogus --format=csv
run query-space nvidia-smi --query-gpu="name, uuid" --format=csv
run query-csv-bad nvidia-smi --query-gpu=name --format=csv,bogus
run query-i-uuid-list nvidia-smi -i 0,0 --query-gpu=index,name --format=csv
run query-dup nvidia-smi --query-gpu=name,name,index --format=csv,noheader
run query-count nvidia-smi --query-gpu=count,index --format=csv,noheader,nounits
run query-mig nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv
run apps-fields nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid,gpu_bus_id,gpu_name --format=csv
run mig-lgi-i0 nvidia-smi mig -lgi -i 0
run mig-lgipp nvidia-smi mig -lgipp
run mig-lcip nvidia-smi mig -lcip
run mig-lcip-gi nvidia-smi mig -lcip -gi 0
run mig-h nvidia-smi mig -h
run mig-none nvidia-smi mig
run mig-lgip-i-bad nvidia-smi mig -lgip -i 3
run topo-h nvidia-smi topo -h
run topo-mp nvidia-smi topo -mp
run topo-p2p nvidia-smi topo -p2p r
run nvlink-h nvidia-smi nvlink -h
run nvlink-status-i0 nvidia-smi nvlink -s -i 0
run nvlink-c nvidia-smi nvlink -c
run nvlink-e nvidia-smi nvlink -e
run dmon-c1 nvidia-smi dmon -c 1
run pmon-c1 nvidia-smi pmon -c 1
run x-only nvidia-smi -x
run L-extra nvidia-smi -L --query-gpu=name --format=csv
run loop-q nvidia-smi --query-gpu=index,name --format=csv -l 1 -c 2
run version-h nvidia-smi -h
# The library and what it exports: where NVIDIA's toolkit puts it, and its symbol names.
{
  lib=$(python3 -c 'import ctypes.util as u; print(u.find_library("nvidia-ml") or "")')
  echo "find_library: $lib"
  ldconfig -p | grep -E 'nvidia-ml|libcuda\.' || true
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    ls -la "$d"/libnvidia-ml* 2>/dev/null
  done
  command -v nvidia-smi; ls -la "$(command -v nvidia-smi)"
  uname -r; cat /proc/driver/nvidia/version 2>/dev/null
  ls -la /dev/nvidia* 2>/dev/null
} >"$out/nvml/library.txt" 2>&1
python3 - >"$out/nvml/symbols.txt" 2>&1 <<'PY'
import ctypes.util, os, re, glob
paths = glob.glob("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*") + glob.glob("/usr/local/nvidia/lib64/libnvidia-ml.so.*") + glob.glob("/usr/lib64/libnvidia-ml.so.*")
for p in sorted(set(os.path.realpath(p) for p in paths)):
    data = open(p, "rb").read()
    names = sorted(set(m.decode() for m in re.findall(rb"\x00(nvml[A-Za-z0-9_]+)\x00", data)))
    print(p, len(names))
    print("\n".join(names))
    break
PY
# The probes against NVIDIA's library.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >"$out/nvml/pip.txt" 2>&1
export PYTHONPATH=/tmp/site
probe() { # label, environment...: the probe, gpustat, nvitop and go-nvml with that environment
  local label=$1; shift
  env "$@" timeout 60 python3 hack/nvml/probe.py >"$out/nvml/probe-$label.json" 2>"$out/nvml/probe-$label.err"
  { echo "\$ gpustat --json"; env "$@" timeout 30 python3 -m gpustat --json 2>&1; echo "rc=$?"
    echo "\$ gpustat --no-color"; env "$@" timeout 30 python3 -m gpustat --no-color 2>&1; echo "rc=$?"
    echo "\$ nvitop -1"; env "$@" COLUMNS=160 timeout 30 python3 -m nvitop -1 --ascii 2>&1; echo "rc=$?"
    echo "\$ gonvml"; env "$@" timeout 30 .devbin/gonvml 2>&1; echo "rc=$?"
  } >"$out/nvml/consumers-$label.txt" 2>&1
}
probe real
if [ -n "${DRA_FAKE_NVML:-}" ]; then
  probe fake LD_LIBRARY_PATH="$DRA_FAKE_NVML/lib" NVML_PROBE_LIB="$DRA_FAKE_NVML/lib/libnvidia-ml.so.1" \
    DRA_FAKE_ROOT="$DRA_FAKE_NVML/root"
fi
echo "captured: $(find "$out" -type f | wc -l) files"
