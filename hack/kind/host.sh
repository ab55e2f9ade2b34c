#!/usr/bin/env bash
# hack/kind/host.sh setup|reset|status: what this host needs before kind can run, applied only
# where a probe shows it is needed, recorded, and undone by `reset` (make kind-host-reset).
#   dockerd    started (in the background) when it is installed but not running; reset stops it.
#   runtime    when `docker run --privileged` fails because the host's capability bounding set lacks
#              capabilities docker asks for (sandboxes without CAP_SYS_RESOURCE), a runc wrapper that
#              drops exactly those from each OCI spec becomes docker's default runtime
#              (/etc/docker/daemon.json, original kept; dockerd reloads it on SIGHUP).
#   sysctls    fs.inotify.max_user_instances/max_user_watches raised to kind's documented minimums
#              when lower (several kubelets on one kernel).
# State: /var/lib/dra-fake-kind (outside the checkout: host changes outlive a clone).
LOG_NAME=kind-host
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
STATE=${DRA_FAKE_KIND_HOST_STATE:-/var/lib/dra-fake-kind}
WRAPPER=/usr/local/sbin/dra-fake-kind-runc
RUNTIME_NAME=dra-fake-kind-runc
DAEMON_JSON=/etc/docker/daemon.json
PROBE_IMAGE=$IMAGE_PREFIX/probe:pause
declare -A SYSCTL_MIN=([fs.inotify.max_user_instances]=512 [fs.inotify.max_user_watches]=524288)
# Linux capability numbers 0..40 (linux/capability.h), as docker names them.
CAPS=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
  NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
  SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
  AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ
  PERFMON BPF CHECKPOINT_RESTORE)

missing_caps() { # capabilities docker --privileged asks for that this host's bounding set lacks
  local bnd i out=()
  bnd=$((16#$(awk '/^CapBnd/{print $2}' /proc/self/status)))
  for i in "${!CAPS[@]}"; do (( (bnd >> i) & 1 )) || out+=("CAP_${CAPS[$i]}"); done
  echo "${out[@]}"
}

docker_up() { docker info >/dev/null 2>&1; }

start_dockerd() {
  docker_up && return 0
  command -v dockerd >/dev/null || die "docker is not installed (Debian: apt-get install docker.io)"
  [ "$(id -u)" = 0 ] || die "dockerd is not running; start it (or run this as root)"
  log "starting dockerd (log: $STATE/dockerd.log)"
  # Without our tool dirs in its PATH: its containerd looks up containerd-shim-runc-v2 there, and the
  # one tools.sh builds for the node image (containerd 2) speaks a protocol Debian's 1.6 cannot read.
  local path=${PATH//"$KIND_BIN:"/}
  path=${path//"$REPO/.tools/bin:"/}
  PATH=$path setsid dockerd > "$STATE/dockerd.log" 2>&1 < /dev/null &
  echo $! > "$STATE/dockerd.pid"
  for _ in $(seq 1 60); do docker_up && return 0; sleep 0.5; done
  tail -20 "$STATE/dockerd.log" >&2; die "dockerd did not come up"
}

probe_image() { # a one-file image (static pause binary) to probe the runtime with
  image_exists "$PROBE_IMAGE" && return 0
  [ -x "$KIND_BIN/pause" ] || "$REPO/hack/kind/tools.sh" >/dev/null
  local d; d=$(mktemp -d); cp "$KIND_BIN/pause" "$d/pause"
  tar -C "$d" -c pause | docker import --change 'ENTRYPOINT ["/pause"]' - "$PROBE_IMAGE" >/dev/null
  rm -rf "$d"
}

privileged_works() { docker run --rm --privileged "$PROBE_IMAGE" -v >/dev/null 2>"$STATE/probe.err"; }

write_wrapper() { # $1: capabilities to drop
  local tmp; tmp=$(mktemp)
  cat > "$tmp" <<WRAP
#!/bin/bash
# Installed by dra-fake's hack/kind/host.sh (removed by make kind-host-reset). Docker asks runc for
# every capability in --privileged containers; this host's bounding set lacks: $1.
# Drop those from the OCI spec (create/run) or process file (exec), then run the real runc.
drop='$1'
args=("\$@"); cmd=""; bundle=""; proc=""
for ((i=0; i<\${#args[@]}; i++)); do
  case "\${args[\$i]}" in
    create|run|exec) [ -z "\$cmd" ] && cmd=\${args[\$i]} ;;
    --bundle|-b) bundle=\${args[\$((i+1))]} ;;
    --bundle=*) bundle=\${args[\$i]#--bundle=} ;;
    --process|-p) proc=\${args[\$((i+1))]} ;;
    --process=*) proc=\${args[\$i]#--process=} ;;
  esac
done
strip() { # file, jq path of the capabilities object
  local f=\$1 tmp
  [ -f "\$f" ] || return 0
  tmp=\$(mktemp "\$f.XXXX") || return 1
  jq --arg drop "\$drop" "if \$2 then \$2 |= with_entries(.value |= (if type == \"array\" then map(select(. as \\\$c | (\\\$drop | split(\" \") | index(\\\$c)) | not)) else . end)) else . end" "\$f" > "\$tmp" && mv "\$tmp" "\$f"
}
case "\$cmd" in
  create|run) strip "\${bundle:-.}/config.json" .process.capabilities ;;
  exec) [ -n "\$proc" ] && strip "\$proc" .capabilities ;;
esac
exec $(command -v runc) "\$@"
WRAP
  install -m 0755 "$tmp" "$WRAPPER"; rm -f "$tmp"
}

# daemon_json set|reset: add our runtime as docker's default, or restore the saved original.
daemon_json() {
  python3 - "$1" "$DAEMON_JSON" "$STATE/daemon.json.orig" "$RUNTIME_NAME" "$WRAPPER" <<'PY'
import json, os, sys
action, path, orig_path, name, wrapper = sys.argv[1:]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
current = load(path)
if action == "set":
    if not os.path.exists(orig_path):  # the first setup keeps the original (or its absence)
        with open(orig_path, "w") as f:
            json.dump({"existed": current is not None, "config": current or {}}, f)
    config = dict(current or {})
    config.setdefault("runtimes", {})[name] = {"path": wrapper}
    config["default-runtime"] = name
else:
    saved = load(orig_path) or {"existed": current is not None, "config": current or {}}
    config = dict(saved["config"])
    # dockerd keeps a reloaded default runtime unless the file names one: name the original.
    config.setdefault("default-runtime", "runc")
    config.setdefault("runtimes", {})
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(config, f, indent=2)
os.replace(path + ".tmp", path)
PY
}

reload_dockerd() {
  local pid; pid=$(pidof dockerd) || die "dockerd is not running"
  kill -HUP "$pid"
  for _ in $(seq 1 40); do
    [ "$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null)" = "$1" ] && return 0; sleep 0.25
  done
  die "dockerd did not switch its default runtime to $1 (see its log)"
}

setup() {
  [ "$(id -u)" = 0 ] || SUDO_HINT=1
  mkdir -p "$STATE"
  start_dockerd
  probe_image
  if privileged_works; then
    log "docker run --privileged works: no runtime wrapper needed"
  else
    grep -q 'apply caps' "$STATE/probe.err" || { cat "$STATE/probe.err" >&2; die "docker run --privileged fails (not a capability problem)"; }
    [ -z "${SUDO_HINT:-}" ] || die "docker run --privileged fails here; run make kind-host as root to install the runtime wrapper"
    caps=$(missing_caps)
    log "docker run --privileged fails (bounding set lacks: $caps): installing $WRAPPER as docker's default runtime"
    write_wrapper "$caps"
    daemon_json set
    reload_dockerd "$RUNTIME_NAME"
    privileged_works || { cat "$STATE/probe.err" >&2; die "still failing with the wrapper"; }
    log "docker run --privileged works through $RUNTIME_NAME"
  fi
  for name in "${!SYSCTL_MIN[@]}"; do
    now=$(sysctl -n "$name"); want=${SYSCTL_MIN[$name]}
    if [ "$now" -lt "$want" ]; then
      [ -f "$STATE/sysctl.$name" ] || echo "$now" > "$STATE/sysctl.$name"
      sysctl -q -w "$name=$want"; log "sysctl $name: $now -> $want"
    fi
  done
  log "host ready for kind (undo: make kind-host-reset)"
}

reset() {
  [ -d "$STATE" ] || { log "nothing to reset"; return 0; }
  if docker_up && [ -f "$WRAPPER" ]; then
    using=$(docker ps -q | xargs -r docker inspect -f '{{.Name}} {{.HostConfig.Runtime}}' | awk -v r="$RUNTIME_NAME" '$2 == r || $2 == "" {print $1}')
    if [ -n "$using" ] && [ "$(docker info --format '{{.DefaultRuntime}}')" = "$RUNTIME_NAME" ]; then
      die "containers still run on $RUNTIME_NAME (delete the kind clusters first: make kind-down):$(echo "$using" | tr '\n' ' ')"
    fi
  fi
  if [ -f "$STATE/daemon.json.orig" ]; then
    daemon_json reset
    if docker_up; then reload_dockerd "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["default-runtime"])' "$DAEMON_JSON")"; fi
    python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["existed"] else 1)' "$STATE/daemon.json.orig" \
      || rm -f "$DAEMON_JSON"   # dockerd already runs with the defaults; leave no file behind
    rm -f "$STATE/daemon.json.orig"; log "docker's default runtime restored"
  fi
  [ -f "$WRAPPER" ] && rm -f "$WRAPPER" && log "removed $WRAPPER"
  for f in "$STATE"/sysctl.*; do
    [ -f "$f" ] || continue
    name=${f##*/sysctl.}; sysctl -q -w "$name=$(cat "$f")"; log "sysctl $name restored to $(cat "$f")"; rm -f "$f"
  done
  if [ -f "$STATE/dockerd.pid" ]; then
    pid=$(cat "$STATE/dockerd.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      log "stopped the dockerd that setup started"
    fi
    rm -f "$STATE/dockerd.pid"
  fi
  rm -f "$STATE/probe.err" "$STATE/dockerd.log"; rmdir "$STATE" 2>/dev/null || true
}

status() {
  echo "docker daemon:   $(docker_up && echo running || echo 'not running')$( [ -f "$STATE/dockerd.pid" ] && echo ' (started by setup)')"
  echo "default runtime: $(docker_up && docker info --format '{{.DefaultRuntime}}' || echo '-')"
  echo "wrapper:         $( [ -f "$WRAPPER" ] && echo "$WRAPPER" || echo none)"
  echo "bounding set lacks: $(missing_caps)"
  for name in "${!SYSCTL_MIN[@]}"; do echo "sysctl $name = $(sysctl -n "$name")$( [ -f "$STATE/sysctl.$name" ] && echo " (was $(cat "$STATE/sysctl.$name"))")"; done
}

case "${1:-}" in
  setup) setup ;;
  reset) reset ;;
  status) status ;;
  *) echo "usage: $0 setup|reset|status" >&2; exit 2 ;;
esac
