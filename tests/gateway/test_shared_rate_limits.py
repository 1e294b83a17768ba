"""Rate limits shared by gateway replicas through Redis, and kept per replica while Redis
is out of reach."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import AuthStack
from tests.support.databases import PrivateRedis
from tests.support.gateway_server import GatewayServer

pytestmark = pytest.mark.integration


def gateways(auth_stack: AuthStack, count: int, **overrides: object) -> Iterator[list[str]]:
    servers = [GatewayServer(auth_stack.settings(**overrides)).start() for _ in range(count)]
    try:
        yield [server.url for server in servers]
    finally:
        for server in servers:
            server.stop()


def statuses(urls: list[str], key: str) -> list[int]:
    headers = {"Authorization": f"Bearer {key}"}
    return [httpx.get(f"{url}/api/v1/tasks", headers=headers).status_code for url in urls]


def test_one_keys_limit_holds_across_gateways(
    auth_stack: AuthStack, redis_server: str, redis_prefix: str
) -> None:
    for urls in gateways(
        auth_stack, 2, rate_limit="4/minute", redis_url=redis_server, redis_key_prefix=redis_prefix
    ):
        first, second = urls
        assert statuses([first, second, first, second], auth_stack.key_a) == [200] * 4
        # The fifth request is over the key's limit on either gateway.
        limited = statuses([first, second], auth_stack.key_a)
        assert limited == [429, 429]
        # Another key has a window of its own.
        assert statuses([second], auth_stack.key_b) == [200]


def test_an_unreachable_redis_leaves_each_gateway_counting_alone(
    auth_stack: AuthStack, private_redis: PrivateRedis, redis_prefix: str
) -> None:
    for urls in gateways(
        auth_stack,
        1,
        rate_limit="3/minute",
        redis_url=private_redis.url,
        redis_key_prefix=redis_prefix,
    ):
        (url,) = urls
        assert statuses([url], auth_stack.key_a) == [200]
        private_redis.stop()
        # Still answering, still bounded: the replica's own window takes over.
        assert statuses([url] * 4, auth_stack.key_a) == [200, 200, 200, 429]
