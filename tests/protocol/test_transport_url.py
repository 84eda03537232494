"""``serve --transport``: what is accepted, what is refused and with which typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.core.errors import InvalidArgument, LimitExceeded
from protocol.core.limits import MAX_OPTION_CHARS, MAX_TRANSPORT_CHARS, MAX_TRANSPORT_SERVERS
from protocol.core.transport_url import _ipv6, check_tls_file, is_nats, is_tls, parse_transport


def test_a_cluster_is_parsed_to_one_canonical_url() -> None:
    spec = parse_transport(
        " nats://127.0.0.1:4222,nats://Node-B.example:4223,[::1]:7,127.0.0.1:4222"
    )
    assert spec.servers == ("127.0.0.1:4222", "node-b.example:4223", "[::1]:7")
    assert spec.url == "nats://127.0.0.1:4222,node-b.example:4223,[::1]:7"
    assert spec.server_urls[1] == "nats://node-b.example:4223"
    assert parse_transport(spec.url) == spec and is_nats(spec.url)
    assert not is_nats("/run/user/1000/shepherd/x")
    assert not spec.tls and not is_tls(spec.url)


def test_tls_names_the_same_servers_and_says_every_connection_is_tls() -> None:
    spec = parse_transport(" TLS://127.0.0.1:4222,tls://Node-B.example:4223,[::1]:7")
    assert spec.tls and spec.servers == ("127.0.0.1:4222", "node-b.example:4223", "[::1]:7")
    assert spec.url == "tls://127.0.0.1:4222,node-b.example:4223,[::1]:7"
    assert spec.server_urls == [f"tls://{s}" for s in spec.servers]
    assert parse_transport(spec.url) == spec
    assert is_nats(spec.url) and is_tls(spec.url)  # a NATS transport, over TLS


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("", "empty"),
        ("  ", "empty"),
        ("a" * (MAX_OPTION_CHARS + 1), f"at most {MAX_OPTION_CHARS}"),
        ("ca\x00.pem", "NUL"),
    ],
)
def test_a_tls_file_option_out_of_its_bounds_is_invalid_argument_naming_it(
    raw: str, words: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        check_tls_file(raw, "--nats-ca")
    assert "--nats-ca" in refused.value.message and words in refused.value.message
    assert check_tls_file("ca.pem", "--nats-ca") == "ca.pem"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("http://host:1", "scheme 'http'"),
        ("tcp://host:1", "scheme 'tcp'"),
        ("tls://host:1,nats://other:2", "mixes schemes"),
        ("nats://host:1,tls://other:2", "mixes schemes"),
        ("tls://host:1,http://other:2", "mixes schemes"),
        ("tls://", "empty server"),
        ("tls://host", "no port"),
        ("tls://host:0", "1..65535"),
        ("tls://host:65536", "1..65535"),
        ("tls://host:NaN", "1..65535"),
        ("tls://user:secret@host:1", "credentials"),
        ("tls://host:1/path", "not HOST:PORT"),
        ("tls://host:1?x=1", "not HOST:PORT"),
        ("tls://host\x00:1", "not HOST:PORT"),
        ("tls://-host:1", "not a host name"),
        ("tls://[::zz]:1", "not an IPv6 address"),
        ("/tmp/mailbox", "not supported"),
        ("nats://", "empty server"),
        ("nats://host", "no port"),
        ("nats://host:0", "1..65535"),
        ("nats://host:65536", "1..65535"),
        ("nats://host:-1", "1..65535"),
        ("nats://host:NaN", "1..65535"),
        ("nats://host:inf", "1..65535"),
        ("nats://host:²", "1..65535"),
        ("nats://host:1e3", "1..65535"),
        ("nats://user:secret@host:1", "credentials"),
        ("nats://host:1/path", "not HOST:PORT"),
        ("nats://host:1?x=1", "not HOST:PORT"),
        ("nats://ho st:1", "not HOST:PORT"),
        ("nats://host\x00:1", "not HOST:PORT"),
        ("nats://-host:1", "not a host name"),
        ("nats://a..b:1", "not a host name"),
        ("nats://[::zz]:1", "not an IPv6 address"),
        ("nats://a:1,", "empty server"),
    ],
)
def test_a_bad_transport_is_invalid_argument_naming_the_option(raw: str, words: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_transport(raw)
    assert "--transport" in refused.value.message and words in refused.value.message


@pytest.mark.parametrize("scheme", ["nats://", "tls://"])
def test_too_many_servers_or_characters_is_limit_exceeded(scheme: str) -> None:
    servers = ",".join(f"h{i}:1" for i in range(MAX_TRANSPORT_SERVERS))
    assert len(parse_transport(scheme + servers).servers) == MAX_TRANSPORT_SERVERS
    with pytest.raises(LimitExceeded, match=f"at most {MAX_TRANSPORT_SERVERS}"):
        parse_transport(scheme + servers + ",one-more:1")
    with pytest.raises(LimitExceeded, match=f"at most {MAX_TRANSPORT_CHARS}"):
        parse_transport(scheme + "a" * MAX_TRANSPORT_CHARS + ":1")


@given(st.text(max_size=300))
def test_any_text_is_parsed_or_refused_with_a_typed_error(raw: str) -> None:
    try:
        spec = parse_transport(raw)
    except (InvalidArgument, LimitExceeded):
        return
    assert parse_transport(spec.url) == spec  # the canonical form is stable


@given(
    st.lists(
        st.tuples(st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True), st.integers(1, 65535)),
        min_size=1,
        max_size=MAX_TRANSPORT_SERVERS,
    ),
    st.sampled_from(["nats://", "tls://"]),
)
def test_every_host_port_list_within_the_bounds_is_accepted(
    pairs: list[tuple[str, int]], scheme: str
) -> None:
    spec = parse_transport(scheme + ",".join(f"{h}:{p}" for h, p in pairs))
    assert spec.servers == tuple(dict.fromkeys(f"{h}:{p}" for h, p in pairs))
    assert spec.tls is (scheme == "tls://")


@given(st.ip_addresses(v=6))
def test_every_ipv6_address_in_brackets_is_accepted(address: object) -> None:
    assert parse_transport(f"nats://[{address}]:4222").servers == (f"[{address}]:4222",)


@given(st.text(alphabet="0123456789abcdefABCDEF:.", max_size=45))
def test_ipv6_literals_are_judged_as_the_standard_library_judges_them(text: str) -> None:
    import ipaddress

    try:
        ipaddress.IPv6Address(text)
        valid = True
    except ValueError:
        valid = False
    assert _ipv6(text) is valid
