"""Who may call the API, and how often: LibreTranslate's API keys and request limits.

As in LibreTranslate, a key is optional by default: a client without one is limited by `--req-limit` (requests a
minute from its IP address), a client with a valid key by its key's own limit, and a wrong key is refused (403).
A key is needed only where the server is told so: `--require-api-key-origin` (a key unless the request's `Origin`
matches the pattern, e.g. the server's own web page), `--under-attack` (a key from everyone). Limits are counted in
a moving window of one minute (the `limits` package, as flask-limiter does for LibreTranslate) in
`--req-limit-storage`: this process's memory, or a storage that replicas share (`redis://HOST:PORT`, as
LibreTranslate's); a client over its limit gets 429 with `Retry-After`: the seconds until its oldest request in the
window expires.
"""

import hmac
import math
import re
import time
from typing import Any

from fastapi import Request
from limits import RateLimitItemPerMinute
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from .parsing import ApiError
from .settings import ServeSettings, key_and_limit

NO_LIMIT = -1


class Access:
    """Checks a request's API key and counts it against its client's limit (see the module's docstring)."""

    def __init__(self, settings: ServeSettings):
        self.keys = dict(key_and_limit(line) for line in settings.api_keys)
        self.req_limit = settings.req_limit
        origin = settings.require_api_key_origin
        self.origin = re.compile(origin) if origin else None
        self.under_attack = settings.under_attack
        self.limiter = MovingWindowRateLimiter(limit_storage(settings.req_limit_storage))

    @property
    def key_required(self) -> bool:
        """Whether a client without a key may be refused (LibreTranslate's `keyRequired`)."""
        return bool(self.keys) and (self.origin is not None or self.under_attack)

    def check_request(self, request: Request, fields: dict[str, Any]) -> None:
        """`check` for a request: its `api_key` field, its client's address and its `Origin` header."""
        address = request.client.host if request.client else ""
        self.check(fields.get("api_key"), address, request.headers.get("origin", ""))

    def check(self, api_key: object, address: str, origin: str) -> None:
        """Raises ApiError 403 for a wrong key, 400 where a key is needed and none was given, 429 (with
        Retry-After) over the client's limit; counts the request otherwise."""
        has_key = bool(self.keys) and isinstance(api_key, str) and api_key in self.keys
        if self.keys and api_key and not has_key:
            raise ApiError(403, "Invalid API key")
        if not has_key and self.keys:
            if self.under_attack or (self.origin is not None and not self.origin.match(origin)):
                raise ApiError(400, "Please contact the server operator to get an API key")
        limit = self.keys[api_key] if has_key else self.req_limit
        if limit == NO_LIMIT:
            return
        item = RateLimitItemPerMinute(limit)
        client = f"key:{api_key}" if has_key else f"ip:{address}"
        if not self.limiter.hit(item, client):
            reset = self.limiter.get_window_stats(item, client).reset_time
            retry_after = max(1, math.ceil(reset - time.time()))
            raise ApiError(429, f"Slowdown: {limit} per 1 minute", headers={"Retry-After": str(retry_after)})


def limit_storage(uri: str):
    """The `limits` storage at `uri` (memory://, redis://HOST:PORT, ...); ValueError naming the URI where it is not
    one or cannot be reached."""
    try:
        storage = storage_from_string(uri)
    except (ConfigurationError, ValueError) as error:
        raise ValueError(f"--req-limit-storage {uri}: {error}") from None
    if not storage.check():
        raise ValueError(f"--req-limit-storage {uri}: the storage does not answer")
    return storage


def check_metrics_token(authorization: str | None, token: str) -> None:
    """LibreTranslate's `--metrics-auth-token`: where a token is set, ApiError 401 unless `authorization` (the
    request's Authorization header) is `Bearer TOKEN`."""
    if token and not hmac.compare_digest((authorization or "").encode(), f"Bearer {token}".encode()):
        raise ApiError(401, "Unauthorized")
