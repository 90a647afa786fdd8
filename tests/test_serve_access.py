"""API keys and request limits as LibreTranslate has them: keys optional by default and raising a client's limit,
mandatory only when asked (--require-api-key-origin, --under-attack), a wrong key refused; --req-limit per IP in a
moving window answering 429 with Retry-After; /metrics behind its own token."""

import argparse
import time

import pytest

from vanilla_training.serving.access import Access, check_metrics_token
from vanilla_training.serving.parsing import ApiError
from vanilla_training.serving.settings import ServeSettings, key_file

KEYS = frozenset({"plain-key", "busy-key 5"})


def refused(access: Access, api_key=None, address="10.0.0.1", origin="") -> tuple[int, str, dict | None] | None:
    """(status, message, headers) of the refusal, or None where the request is let through."""
    try:
        access.check(api_key, address, origin)
    except ApiError as error:
        return error.status, error.message, error.headers
    return None


def test_without_keys_or_limits_everyone_is_let_through_and_a_key_is_ignored():
    access = Access(ServeSettings())
    assert [refused(access), refused(access, "anything")] * 50 == [None, None] * 50


def test_keys_are_optional_by_default_and_a_wrong_key_is_refused():
    access = Access(ServeSettings(api_keys=KEYS))
    assert refused(access) is None
    assert refused(access, "plain-key") is None
    assert refused(access, "wrong") == (403, "Invalid API key", None)
    assert not access.key_required


@pytest.mark.parametrize("origin", ["https://evil.example", ""])
def test_require_api_key_origin_asks_for_a_key_from_other_origins(origin):
    access = Access(ServeSettings(api_keys=KEYS, require_api_key_origin=r"https://translate\.example\.org"))
    assert access.key_required
    assert refused(access, origin="https://translate.example.org") is None
    assert refused(access, origin=origin) == (400, "Please contact the server operator to get an API key", None)
    assert refused(access, "plain-key", origin=origin) is None


def test_under_attack_asks_everyone_for_a_key():
    access = Access(ServeSettings(api_keys=KEYS, under_attack=True))
    assert refused(access, origin="http://anywhere")[0] == 400
    assert refused(access, "plain-key") is None


def test_req_limit_counts_each_address_apart_and_answers_429_with_retry_after():
    access = Access(ServeSettings(req_limit=3))
    assert [refused(access, address="10.0.0.1") for _ in range(3)] == [None] * 3
    status, message, headers = refused(access, address="10.0.0.1")
    assert (status, message) == (429, "Slowdown: 3 per 1 minute")
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert refused(access, address="10.0.0.2") is None  # another client


def test_a_key_raises_its_clients_limit_to_its_own():
    access = Access(ServeSettings(api_keys=KEYS, req_limit=1))
    assert refused(access) is None and refused(access)[0] == 429
    assert [refused(access, "busy-key") for _ in range(5)] == [None] * 5  # its own limit: 5 a minute
    assert refused(access, "busy-key")[:2] == (429, "Slowdown: 5 per 1 minute")
    assert [refused(access, "plain-key") for _ in range(20)] == [None] * 20  # a bare key: no limit


def test_the_key_file_takes_a_limit_per_key_and_refuses_a_bad_line(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# keys\nplain-key\n\nbusy-key 5\n")
    assert key_file(str(path)) == KEYS
    path.write_text("bad-key five\n")
    with pytest.raises(argparse.ArgumentTypeError, match="`KEY` or `KEY REQUESTS_A_MINUTE`, not 'bad-key five'"):
        key_file(str(path))


def test_metrics_token_is_needed_only_where_set():
    check_metrics_token(None, "")
    check_metrics_token("Bearer s3cret", "s3cret")
    for authorization in (None, "", "s3cret", "Bearer wrong", "Bearer s3cret "):
        with pytest.raises(ApiError) as caught:
            check_metrics_token(authorization, "s3cret")
        assert (caught.value.status, caught.value.message) == (401, "Unauthorized")


def test_the_window_moves_with_each_request_and_retry_after_says_when_the_oldest_leaves(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    access = Access(ServeSettings(req_limit=2))
    for now in (0, 30):
        clock[0] = 1_000_000.0 + now
        assert refused(access) is None
    clock[0] = 1_000_045.0
    assert refused(access)[2] == {"Retry-After": "15"}  # the request of second 0 leaves the window at second 60
    clock[0] = 1_000_061.0  # a fixed window would start afresh here and let two through
    assert refused(access) is None
    assert refused(access)[2] == {"Retry-After": "29"}  # the request of second 30 is still in the window
