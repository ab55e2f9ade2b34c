"""Idle-GPU lending's state kept across plugin restarts (docs/sharing.md): a file in the plugin's
data directory, beside the claims' checkpoint, written after every sample the lending service
observes and read once at start, before the first slice and the first prepare. Without it a
restarted plugin would start every lend view `unknown`: the spot pods' grace periods would start
over and a lent GPU would stop taking spot claims until its owners were idle for the hold time
again.

The file is replaced atomically (a SIGKILL leaves the old state or the new one), not fsynced: it
is rewritten every sample, and what a power cut loses is at most a few samples, after which the
node restarts its pods anyway. A file that cannot be read is logged and lending starts `unknown`,
as without one: nothing lent, nothing evicted.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from dra_fake.core.atomic import TEMP_SUFFIX, atomic_write, temp_name_prefix
from dra_fake.gpu.lending import Lending, LendingSettings

FILE_NAME = "lending.json"
FILE_MODE = 0o600
log = logging.getLogger(__name__)


class KeptLending:
    """A node's lending state (`state`) and the file it is kept in (None: not kept, as in tests
    and where the node's owner has no data directory)."""

    def __init__(self, settings: LendingSettings, now: float, path: Path | None = None) -> None:
        self.path = path
        self.state = self._load(settings, now)
        self._save_failed = False

    def _load(self, settings: LendingSettings, now: float) -> Lending:
        if self.path is None:
            return Lending(settings, now)
        for temp in self.path.parent.glob(f"{temp_name_prefix(self.path)}*{TEMP_SUFFIX}"):
            temp.unlink(missing_ok=True)  # a write a SIGKILL cut short: the file is the old state
        try:
            saved = json.loads(self.path.read_bytes())
            state = Lending.restored(settings, now, saved, str(self.path))
        except FileNotFoundError:
            return Lending(settings, now)
        # JSONDecodeError and LendingStateError are ValueErrors; RecursionError: nested too deep
        except (OSError, ValueError, RecursionError) as err:
            log.warning(
                "GPU lending state not restored: every lend view starts unknown",
                extra={"file": str(self.path), "error": str(err)},
            )
            return Lending(settings, now)
        log.info("GPU lending state restored", extra={"file": str(self.path), "states": state.states()})
        return state

    def save(self) -> None:
        """Write the state; a failure is logged once (lending goes on, a restart starts unknown)."""
        if self.path is None:
            return
        try:
            data = json.dumps(self.state.saved(), sort_keys=True).encode()
            atomic_write(self.path, data, FILE_MODE, durable=False)
        except OSError as err:
            if not self._save_failed:
                log.warning("GPU lending state not saved", extra={"file": str(self.path), "error": str(err)})
            self._save_failed = True
            return
        self._save_failed = False
