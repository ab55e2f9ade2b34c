"""The IMEX configuration directory of one ComputeDomain on one node
(docs/reference/nvidia-compute-domains.md#54-imex-daemon-config).

Daemon prepare creates `<plugins-dir>/compute-domain.nvidia.com/domains/<cdUID>/` with
`imexd.cfg.tmpl`; the daemon (mounted at /imexd) renders `imexd.cfg` with its pod IP, writes
`nodes.cfg` (the DNS names of every possible peer) and `hosts` (IP -> name), and records the
simulated IMEX daemon's state in `imex.state`, which `imex-daemon check` reads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dra_fake.core.atomic import atomic_write, fsync_dir

TEMPLATE_NAME = "imexd.cfg.tmpl"
CONFIG_NAME = "imexd.cfg"
NODES_NAME = "nodes.cfg"
HOSTS_NAME = "hosts"
STATE_NAME = "imex.state"
BIND_IP_PLACEHOLDER = "{{ .IMEX_CMD_BIND_INTERFACE_IP }}"

TEMPLATE = f"""# IMEX daemon configuration (simulated by dra-fake; keys as NVIDIA's template)
LOG_LOCAL_FILE=
LOG_FILE_NAME=/var/log/nvidia-imex.log
LOG_LEVEL=4
DAEMONIZE=0
SERVER_IP_ADDR=
SERVER_PORT=50000
IMEX_CMD_BIND_INTERFACE_IP={BIND_IP_PLACEHOLDER}
IMEX_CMD_PORT=50005
IMEX_CMD_ENABLED=1
IMEX_NODE_CONFIG_FILE=/imexd/{NODES_NAME}
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""


def domain_dir(plugin_data_dir: Path, cd_uid: str) -> Path:
    return plugin_data_dir / "domains" / cd_uid


def domain_uids(plugin_data_dir: Path) -> list[str]:
    root = plugin_data_dir / "domains"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def remove_domain_dir(plugin_data_dir: Path, cd_uid: str) -> bool:
    """Remove a domain's directory (the daemon writes only plain files into it); False if absent."""
    directory = domain_dir(plugin_data_dir, cd_uid)
    if not directory.is_dir():
        return False
    shutil.rmtree(directory)
    fsync_dir(directory.parent)
    return True


DIRECTORY_MODE = 0o770  # the plugin (owner) writes the template, the daemon (group) its files


def write_template(directory: Path, daemon_gid: int) -> None:
    """The domain's directory, writable by the daemon's group (the daemon runs as a non-root uid
    while the plugin runs as root without capabilities but CHOWN), with the config template."""
    directory.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
    st = directory.stat()
    if st.st_gid != daemon_gid:
        os.chown(directory, -1, daemon_gid)
    if st.st_mode & 0o777 != DIRECTORY_MODE:
        directory.chmod(DIRECTORY_MODE)
    atomic_write(directory / TEMPLATE_NAME, TEMPLATE.encode(), 0o644)


def render_config(directory: Path, pod_ip: str) -> str:
    template = (directory / TEMPLATE_NAME).read_text()
    text = template.replace(BIND_IP_PLACEHOLDER, pod_ip)
    atomic_write(directory / CONFIG_NAME, text.encode(), 0o644)
    return text


def dns_name(index: int) -> str:
    return f"compute-domain-daemon-{index:04d}"


def write_nodes(directory: Path, max_nodes: int, peers: list[tuple[str, int]]) -> None:
    """nodes.cfg lists every possible peer by DNS name; `hosts` maps the known peers' IPs."""
    names = "".join(f"{dns_name(i)}\n" for i in range(max_nodes))
    atomic_write(directory / NODES_NAME, names.encode(), 0o644)
    hosts = "# Compute Domain Daemon mappings\n" + "".join(
        f"{ip}\t{dns_name(index)}\n" for ip, index in sorted(peers, key=lambda p: p[1])
    )
    atomic_write(directory / HOSTS_NAME, hosts.encode(), 0o644)
