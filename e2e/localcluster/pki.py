"""Key material for the local API server (generated with `cryptography`, no shell-outs)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def write_service_account_key(pki: Path) -> Path:
    """RSA key used to sign and verify service-account tokens; created once per cluster dir."""
    path = pki / "service-account.key"
    if not path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        path.write_bytes(pem)
        path.chmod(0o600)
    return path
