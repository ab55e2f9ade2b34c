#!/bin/sh
# nvidia-smi of dra-fake: simulated GPUs, no NVML. Mounted into every container that is given a
# GPU or MIG device by the dra-fake DRA driver (CDI edits of the claim), at /usr/bin/nvidia-smi.
#
# It shows exactly the devices of this container: one small file per allocated device is mounted
# into $DEVICES (also by CDI), and this script lists that directory. POSIX sh + printf only.
# Layout of nvidia-smi 570/580 (see tests/test_nvidia_smi.py for the real samples compared).
#
#   nvidia-smi                       the summary table (GPUs, MIG devices, processes)
#   nvidia-smi -L | --list-gpus      GPU and MIG lines with UUIDs
#   nvidia-smi --query-gpu=a,b,... --format=csv[,noheader][,nounits]
#   nvidia-smi --version | -h
# DRA_FAKE_ROOT (default empty) prefixes the device directory; tests use it to run the script
# outside a container.
set -u
LC_ALL=C
export LC_ALL
DEVICES="${DRA_FAKE_ROOT:-}/var/run/dra-fake/nvidia-smi/devices"
# Live readings per GPU or MIG UUID, rewritten by the plugin while the container runs: the same
# numbers its metrics endpoint serves (docs/observability.md), and active faults (docs/faults.md).
LIVE="${DRA_FAKE_ROOT:-}/var/run/dra-fake/nvidia-smi/live"
PROG=nvidia-smi

die() { printf '%s\n' "$1" >&2; exit "${2:-2}"; }

# Every device file defines these (shell assignments written by the plugin).
reset_fields() {
  kind=; gpu_uuid=; name=; bus_id=; memory_mib=; driver_version=; cuda_version=; compute_cap=
  power_cap=; mig_mode=; mig_uuid=; mig_profile=; gi_id=; ci_id=; mig_memory_mib=; sm=; ce=; enc=
  dec=; ofa=; jpg=; mig_bar1_mib=; power_draw=; temperature=; sm_clock=; mem_clock=; fb_reserved=0
  utilization=0; memory_util=0; memory_used=0; mig_memory_used=0
  fault_lost=; fault_ecc_sbe=0; fault_ecc_dbe=0; fault_temperature=
}

device_files() {
  for f in "$DEVICES"/*; do
    [ -f "$f" ] && printf '%s\n' "$f"
  done
}

# shellcheck disable=SC1090 # the device and fault files are written by the plugin
load() {
  reset_fields; . "$1"
  if [ -n "$gpu_uuid" ] && [ -f "$LIVE/$gpu_uuid" ]; then . "$LIVE/$gpu_uuid"; fi
  if [ -n "$mig_uuid" ] && [ -f "$LIVE/$mig_uuid" ]; then . "$LIVE/$mig_uuid"; fi
}

temperature() { printf '%s' "$temperature"; }

# A GPU that fell off the bus: NVML cannot open it, and nvidia-smi stops at the first one with
# NVML's text and its documented exit code 15.
fail_if_lost() {
  saved_ifs=$IFS; IFS=$NL
  for f in $FILES; do
    load "$f"
    if [ "$fault_lost" = 1 ]; then
      printf 'Unable to determine the device handle for GPU%s: GPU is lost.  Reboot the system to recover this GPU\n' \
        "${bus_id#0000}"
      exit 15
    fi
  done
  IFS=$saved_ifs
}

NL='
'
FILES=$(device_files)
[ -n "$FILES" ] || { [ "${1:-}" = --version ] || die "No devices were found" 6; }

first_file() { printf '%s\n' "$FILES" | { IFS= read -r l; printf '%s' "$l"; }; }

truncate_name() { # nvidia-smi cuts long product names to 24 characters + "..."
  if [ "${#1}" -gt 27 ]; then printf '%.24s...' "$1"; else printf '%s' "$1"; fi
}

# ---- -L ------------------------------------------------------------------------------------
list_gpus() {
  index=-1; last=; mig_index=0
  IFS=$NL
  for f in $FILES; do
    load "$f"
    if [ "$bus_id" != "$last" ]; then
      index=$((index + 1)); last=$bus_id; mig_index=0
      printf 'GPU %d: %s (UUID: %s)\n' "$index" "$name" "$gpu_uuid"
    fi
    if [ "$kind" = mig ]; then
      printf '  MIG %-12sDevice %2d: (UUID: %s)\n' "$mig_profile" "$mig_index" "$mig_uuid"
      mig_index=$((mig_index + 1))
    fi
  done
  unset IFS
}

# ---- the table -----------------------------------------------------------------------------
LINE='+-----------------------------------------------------------------------------------------+'
GPU_SEP='+-----------------------------------------+------------------------+----------------------+'
MIG_SEP='+------------------+----------------------------------+-----------+-----------------------+'

gpu_rows() { # uses the fields of the current device; $1 = index
  persistence=On
  if [ "$mig_mode" = Enabled ]; then ecc=On; util=N/A; else ecc=$fault_ecc_dbe; util=$utilization%; fi
  printf '|%4d  %-31s%-3s |%19s %3s |%21s |\n' "$1" "$(truncate_name "$name")" "$persistence" \
    "$bus_id" Off "$ecc"
  usage=${memory_used}MiB
  [ "$mig_mode" = Enabled ] && usage=$((mig_count * 13 + memory_used))MiB
  printf '|%4s%6s%6s%16s / %5s |%11s / %9s |%8s%13s |\n' N/A "$(temperature)C" P0 "${power_draw%%.*}W" "${power_cap}W" \
    "$usage" "${memory_mib}MiB" "$util" Default
  printf '|%41s|%24s|%21s |\n' '' '' "${mig_mode:-N/A}"
  printf '%s\n' "$GPU_SEP"
}

table() {
  if command -v date >/dev/null 2>&1; then
    printf '%s       \n' "$(date '+%a %b %e %H:%M:%S %Y')"
  fi
  load "$(first_file)"
  printf '%s\n' "$LINE"
  printf '| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n' "$driver_version" \
    "$driver_version" "$cuda_version"
  printf '%s\n' "$GPU_SEP"
  printf '| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n'
  printf '| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n'
  printf '|                                         |                        |               MIG M. |\n'
  printf '|=========================================+========================+======================|\n'

  index=-1; last=; any_mig=; migs=
  IFS=$NL
  for f in $FILES; do
    load "$f"
    [ "$kind" = mig ] && any_mig=1
    if [ "$bus_id" != "$last" ]; then
      [ -n "$last" ] && emit_gpu
      index=$((index + 1)); last=$bus_id; mig_count=0; gpu_file=$f
    fi
    if [ "$kind" = mig ]; then
      mig_count=$((mig_count + 1))
      migs="$migs$index $f$NL"
    fi
  done
  [ -n "$last" ] && emit_gpu
  unset IFS

  if [ -n "$any_mig" ]; then
    printf '\n%s\n' "$LINE"
    printf '| MIG devices:                                                                            |\n'
    printf '%s\n' "$MIG_SEP"
    printf '| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n'
    printf '|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n'
    printf '|                  |                                  |        ECC|                       |\n'
    printf '|==================+==================================+===========+=======================|\n'
    last_gpu=; dev=0
    IFS=$NL
    for entry in $migs; do
      gpu=${entry%% *}; f=${entry#* }
      [ "$gpu" = "$last_gpu" ] || { dev=0; last_gpu=$gpu; }
      load "$f"
      printf '|%3d%5d%4d%4d  |%19s / %8s    |%3d%7s |%3d%4d%5d%5d%5d |\n' "$gpu" "$gi_id" "$ci_id" "$dev" \
        "$((13 + mig_memory_used))MiB" "${mig_memory_mib}MiB" "$sm" 0 "$ce" "$enc" "$dec" "$ofa" "$jpg"
      printf '|                  |%19s / %8s    |           |                       |\n' 0MiB "${mig_bar1_mib}MiB"
      printf '%s\n' "$MIG_SEP"
      dev=$((dev + 1))
    done
    unset IFS
  fi

  printf '\n%s\n' "$LINE"
  printf '| Processes:                                                                              |\n'
  printf '|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n'
  printf '|        ID   ID                                                               Usage      |\n'
  printf '|=========================================================================================|\n'
  printf '|  No running processes found                                                             |\n'
  printf '%s\n' "$LINE"
}

emit_gpu() { # the GPU whose files were just read; its own fields come from any of its files
  saved_f=$f
  load "$gpu_file"
  gpu_rows "$index"
  f=$saved_f
  load "$f"
}

# ---- --query-gpu ---------------------------------------------------------------------------
query_gpu() { # $1 = fields, $2 = format options
  header=1; units=1
  old_ifs=$IFS; IFS=,
  for opt in $2; do
    case $opt in
      csv|"") ;;
      noheader) header= ;;
      nounits) units= ;;
      *) IFS=$old_ifs; die "\"$opt\" is not a valid format option." ;;
    esac
  done
  IFS=,
  # Validate and build the header.
  line=
  for field in $1; do
    case $field in
      name|gpu_name) h=name ;;
      uuid|gpu_uuid) h=uuid ;;
      memory.total) h="memory.total [MiB]" ;;
      memory.used) h="memory.used [MiB]" ;;
      memory.free) h="memory.free [MiB]" ;;
      memory.reserved) h="memory.reserved [MiB]" ;;
      utilization.gpu) h="utilization.gpu [%]" ;;
      utilization.memory) h="utilization.memory [%]" ;;
      power.draw) h="power.draw [W]" ;;
      power.limit) h="power.limit [W]" ;;
      clocks.sm|clocks.current.sm) h="clocks.current.sm [MHz]" ;;
      clocks.mem|clocks.current.memory) h="clocks.current.memory [MHz]" ;;
      driver_version) h=driver_version ;;
      pci.bus_id|gpu_bus_id) h=pci.bus_id ;;
      index) h=index ;;
      count) h=count ;;
      compute_cap) h=compute_cap ;;
      mig.mode.current) h=mig.mode.current ;;
      temperature.gpu) h=temperature.gpu ;;
      ecc.errors.corrected.volatile.total|ecc.errors.uncorrected.volatile.total) h=$field ;;
      clocks_event_reasons.hw_thermal_slowdown|clocks_throttle_reasons.hw_thermal_slowdown) h=$field ;;
      *) IFS=$old_ifs; die "Field \"$field\" is not a valid field to query." ;;
    esac
    line="${line:+$line, }$h"
  done
  IFS=$old_ifs
  [ -n "$header" ] && printf '%s\n' "$line"

  count=0; last=
  IFS=$NL
  for f in $FILES; do load "$f"; [ "$bus_id" = "$last" ] || { count=$((count + 1)); last=$bus_id; }; done
  index=-1; last=
  for f in $FILES; do
    load "$f"
    [ "$bus_id" = "$last" ] && continue
    index=$((index + 1)); last=$bus_id
    mib=' MiB'; pct=' %'; watt=' W'; mhz=' MHz'
    [ -n "$units" ] || { mib=; pct=; watt=; mhz=; }
    line=
    IFS=,
    for field in $1; do
      case $field in
        name|gpu_name) v=$name ;;
        uuid|gpu_uuid) v=$gpu_uuid ;;
        memory.total) v="$memory_mib$mib" ;;
        memory.used) v="$memory_used$mib" ;;
        memory.free) v="$((memory_mib - fb_reserved - memory_used + 1))$mib" ;; # docs/nvml.md
        memory.reserved) v="$fb_reserved$mib" ;;
        utilization.gpu) if [ "$mig_mode" = Enabled ]; then v="[N/A]"; else v="$utilization$pct"; fi ;;
        utilization.memory) if [ "$mig_mode" = Enabled ]; then v="[N/A]"; else v="$memory_util$pct"; fi ;;
        power.draw) v="$power_draw$watt" ;;
        power.limit) v="$power_cap.00$watt" ;;
        clocks.sm|clocks.current.sm) v="$sm_clock$mhz" ;;
        clocks.mem|clocks.current.memory) v="$mem_clock$mhz" ;;
        driver_version) v=$driver_version ;;
        pci.bus_id|gpu_bus_id) v=$bus_id ;;
        index) v=$index ;;
        count) v=$count ;;
        compute_cap) v=$compute_cap ;;
        mig.mode.current) v=${mig_mode:-[N/A]} ;;
        temperature.gpu) v=$(temperature) ;;
        ecc.errors.corrected.volatile.total) v=$fault_ecc_sbe ;;
        ecc.errors.uncorrected.volatile.total) v=$fault_ecc_dbe ;;
        clocks_event_reasons.hw_thermal_slowdown|clocks_throttle_reasons.hw_thermal_slowdown)
          if [ -n "$fault_temperature" ]; then v=Active; else v="Not Active"; fi ;;
      esac
      line="${line:+$line, }$v"
    done
    IFS=$NL
    printf '%s\n' "$line"
  done
  unset IFS
}

usage() {
  cat <<'EOF'
NVIDIA System Management Interface -- dra-fake simulation (no NVML, no hardware).

    nvidia-smi                      Summary table of the GPUs allocated to this container.
    -L, --list-gpus                 List each GPU (and MIG device) with its UUID.
    --query-gpu=<fields> --format=csv[,noheader][,nounits]
                                    Fields: name, uuid, memory.total, memory.used, memory.free,
                                    memory.reserved, utilization.gpu, utilization.memory,
                                    power.draw, power.limit, clocks.sm, clocks.mem,
                                    driver_version, pci.bus_id, index, count, compute_cap,
                                    mig.mode.current, temperature.gpu,
                                    ecc.errors.{corrected,uncorrected}.volatile.total,
                                    clocks_event_reasons.hw_thermal_slowdown.
    --version                       Print version information and exit.
    -h, --help                      Print this help and exit.
EOF
}

# ---- arguments -----------------------------------------------------------------------------
mode=table; fields=; format=
while [ $# -gt 0 ]; do
  case $1 in
    -L|--list-gpus) mode=list ;;
    --query-gpu=*) mode=query; fields=${1#*=} ;;
    --query-gpu) mode=query; [ $# -gt 1 ] || die "Option --query-gpu requires a value."; shift; fields=$1 ;;
    --format=*) format=${1#*=} ;;
    --format) [ $# -gt 1 ] || die "Option --format requires a value."; shift; format=$1 ;;
    -h|--help) usage; exit 0 ;;
    --version)
      mode=version ;;
    *) die "$PROG (dra-fake): option not simulated: $1 (see nvidia-smi -h)" ;;
  esac
  shift
done

case $mode in table|list|query) fail_if_lost ;; esac
case $mode in
  table) table ;;
  list) list_gpus ;;
  query)
    [ -n "$format" ] || die "--format is required when using --query-gpu"
    case $format in csv|csv,*) ;; *) die "\"$format\" is not a valid format option." ;; esac
    query_gpu "$fields" "${format#csv}" ;;
  version)
    driver=N/A; cuda=N/A
    if [ -n "$FILES" ]; then load "$(first_file)"; driver=$driver_version; cuda=$cuda_version; fi
    printf 'NVIDIA-SMI version  : %s (dra-fake simulation)\n' "$driver"
    printf 'NVML version        : %s\n' "$driver"
    printf 'DRIVER version      : %s\n' "$driver"
    printf 'CUDA Version        : %s\n' "$cuda" ;;
esac
