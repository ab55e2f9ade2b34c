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
mkdir -p "$out/nvml"
# run DIR NAME ARGS...: `nvidia-smi ARGS` with $SMI, its command line as the real captures write it,
# its merged output and its exit code.
run() {
  local dir=$1 name=$2; shift 2
  { echo "\$ nvidia-smi $*"; timeout 30 $SMI "$@" 2>&1; echo "rc=$?"; } >"$dir/$name.txt"
}
smi_suite() { # DIR: every nvidia-smi view we simulate, and its errors
  local d=$1; mkdir -p "$d"
  run "$d" smi
  run "$d" L -L
  run "$d" q -q
  run "$d" qx -q -x
  run "$d" qi0 -q -i 0
  for s in MEMORY UTILIZATION ECC TEMPERATURE POWER CLOCK COMPUTE PIDS PERFORMANCE SUPPORTED_CLOCKS \
    PAGE_RETIREMENT ACCOUNTING ENCODER_STATS SUPPORTED_GPU_TARGET_TEMP VOLTAGE FBC_STATS ROW_REMAPPER \
    RESET_STATUS GSP_FIRMWARE_VERSION POWER_SMOOTHING POWER_PROFILES; do
    run "$d" "qd-$s" -q -d "$s"
  done
  run "$d" qd-combined -q -d MEMORY,ECC,POWER
  run "$d" qd-bogus -q -d BOGUS
  run "$d" qd-x -q -d MEMORY -x
  run "$d" qx-i0 -q -x -i 0
  run "$d" qi-bad -q -i 7
  run "$d" qi-uuid-bad -q -i GPU-00000000-0000-0000-0000-000000000000
  run "$d" L-i0 -L -i 0
  run "$d" list-gpus --list-gpus
  run "$d" ver --version
  run "$d" help -h
  run "$d" helpq --help-query-gpu
  run "$d" help-apps --help-query-compute-apps
  run "$d" query-every --query-gpu="$(tr '\n' , <"$FIELDS" | sed 's/,$//')" --format=csv
  run "$d" query-every-nu --query-gpu="$(tr '\n' , <"$FIELDS" | sed 's/,$//')" --format=csv,noheader,nounits
  run "$d" query-empty --query-gpu= --format=csv
  run "$d" query-noquery --format=csv
  run "$d" query-twobad --query-gpu=name,bogus --format=csv
  run "$d" query-space --query-gpu="name, uuid" --format=csv
  run "$d" query-csv-bad --query-gpu=name --format=csv,bogus
  run "$d" query-i-list -i 0,0 --query-gpu=index,name --format=csv
  run "$d" query-dup --query-gpu=name,name,index --format=csv,noheader
  run "$d" query-count --query-gpu=count,index --format=csv,noheader,nounits
  run "$d" query-nofmt --query-gpu=name,memory.total
  run "$d" apps --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid,gpu_bus_id,gpu_name --format=csv
  run "$d" mig-lgip mig -lgip
  run "$d" mig-lgipp mig -lgipp
  run "$d" mig-lgi mig -lgi
  run "$d" mig-lgi-i0 mig -lgi -i 0
  run "$d" mig-lci mig -lci
  run "$d" mig-lcip mig -lcip
  run "$d" mig-h mig -h
  run "$d" mig-none mig
  run "$d" mig-lgip-i-bad mig -lgip -i 3
  run "$d" topo-m topo -m
  run "$d" topo-h topo -h
  run "$d" nvlink-s nvlink -s
  run "$d" nvlink-h nvlink -h
  run "$d" nvlink-c nvlink -c
  run "$d" bogus --bogus
  run "$d" pm -pm 1
  run "$d" x-only -x
  run "$d" L-extra -L --query-gpu=name --format=csv
  run "$d" loop-c --query-gpu=index,name --format=csv -l 1 -c 2
  { echo "\$ timeout 3 nvidia-smi --query-gpu=index,name --format=csv -l 1"; timeout 3 $SMI --query-gpu=index,name --format=csv -l 1 2>&1; echo "rc=$?"; } >"$d/loop.txt"
  { echo "\$ timeout 1 nvidia-smi --query-gpu=index --format=csv,noheader -lms 300"; timeout 1 $SMI --query-gpu=index --format=csv,noheader -lms 300 2>&1; echo "rc=$?"; } >"$d/loopms.txt"
}
FIELDS=$(mktemp)  # the field names of the real tool's list (its --help-query-gpu), one a line
nvidia-smi --help-query-gpu | sed -n 's/^"\([^"]*\)".*/\1/p' | tr -d ' ' | tr '"' '\n' | grep -v '^$' >"$FIELDS"
SMI=nvidia-smi smi_suite "$out/smi-real"
if [ -n "${DRA_FAKE_NVML:-}" ]; then
  SMI="env DRA_FAKE_ROOT=$DRA_FAKE_NVML/root $DRA_FAKE_NVML/bin/nvidia-smi" smi_suite "$out/smi-fake"
fi
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
