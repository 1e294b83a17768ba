"""API keys: created once, shown once, stored as a SHA-256 hash and bound to a tenant."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import api_keys

KEY_PREFIX = "sk-shuttle-"
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    tenant_id: str
    name: str


@dataclass(frozen=True)
class NewKey:
    key: ApiKey
    secret: str
    """The key to hand to the user: it is not stored and cannot be shown again."""


def hash_key(secret: str) -> str:
    # A plain SHA-256 is enough: the keys are 256 random bits, so there is nothing for a slow
    # KDF to protect against (no dictionary, no brute force), and a fast deterministic hash lets
    # every request find its key with one indexed lookup.
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(self, tenant_id: str, name: str = "") -> NewKey:
        if not re.match(TENANT_PATTERN, tenant_id):
            raise ValueError(f"tenant {tenant_id!r} must be 1-128 letters, digits, '_', '.' or '-'")
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(key_id="key-" + secrets.token_hex(6), tenant_id=tenant_id, name=name)
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(api_keys).values(
                    key_id=key.key_id,
                    tenant_id=tenant_id,
                    name=name,
                    key_hash=hash_key(secret),
                    created_at=datetime.now(UTC),
                )
            )
        return NewKey(key, secret)

    async def verify(self, secret: str) -> ApiKey | None:
        """The key `secret` belongs to, or None when unknown or revoked."""
        if not secret.startswith(KEY_PREFIX):
            return None
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(api_keys.c.key_id, api_keys.c.tenant_id, api_keys.c.name).where(
                        api_keys.c.key_hash == hash_key(secret), api_keys.c.revoked_at.is_(None)
                    )
                )
            ).first()
        return ApiKey(row.key_id, row.tenant_id, row.name) if row else None

    async def active(self, key_id: str) -> bool:
        """Whether `key_id` names a key that exists and is not revoked."""
        async with self._engine.connect() as conn:
            found = await conn.scalar(
                select(api_keys.c.key_id).where(
                    api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None)
                )
            )
        return found is not None

    async def revoke(self, key_id: str) -> bool:
        """Revoke the key; False when no key of that id is active."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(api_keys)
                .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
        return bool(result.rowcount)
