"""Properties of the I/O side's guards and parsers, over generated input (hypothesis):
the web fetch's address guard, `CSVSource` rows and the numbers in them, and the
calculator's pattern against what the calculator reads.

The address guard is checked twice: `address_refusal` on every spelling of an address
from each range that is not public, and `WebSource.resolve` on URLs that spell such a
host in the ways a URL can (IPv6 brackets and zones, IPv4 as one number, hex, short
forms, names from /etc/hosts), against a loopback server that must see no request.
"""

from __future__ import annotations

import asyncio
import csv
import ipaddress
import re
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durafact._activities.calculator import EXPRESSION, MAX_LENGTH, CalculatorError, evaluate
from durafact._activities.csv_source import CSVSource
from durafact._activities.web_source import WebSource, address_refusal
from durafact._core.arithmetic import column_values
from durafact._core.sources import RefusedLocation, SourceError, SourceRef
from tests.properties import FAST as SHARED_FAST

FAST = settings(SHARED_FAST, max_examples=200)

# --- addresses ---------------------------------------------------------------------------

NOT_PUBLIC_V4 = {
    "loopback": ["127.0.0.0/8"],
    "private": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"],
    "link-local": ["169.254.0.0/16"],  # 169.254.169.254: the cloud metadata service
    "multicast": ["224.0.0.0/4"],
    "unspecified": ["0.0.0.0/8"],  # "this network"; 0.0.0.0 reaches the local host
    "shared": ["100.64.0.0/10"],
    "reserved": ["240.0.0.0/4"],  # and 255.255.255.255
}
NOT_PUBLIC_V6 = {
    "loopback": ["::1/128"],
    "unspecified": ["::/128"],
    "link-local": ["fe80::/10"],
    "unique-local": ["fc00::/7"],
    "site-local": ["fec0::/10"],
    "multicast": ["ff00::/8"],
}
PUBLIC = [
    "1.1.1.0/24",
    "8.8.0.0/16",
    "93.184.0.0/16",
    "151.101.0.0/16",
    "2001:4860::/32",
    "2a00:1450::/32",
    "2606:4700::/32",
]


def in_network(cidr: str) -> st.SearchStrategy[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    network = ipaddress.ip_network(cidr)
    return st.integers(0, network.num_addresses - 1).map(lambda i: network[i])


def ranges(table: dict[str, list[str]]) -> st.SearchStrategy[Any]:
    return st.one_of(*(in_network(cidr) for cidrs in table.values() for cidr in cidrs))


V4 = ranges(NOT_PUBLIC_V4)


@st.composite
def hiding_v4(draw: st.DrawFn) -> ipaddress.IPv6Address:
    """A non-public IPv4 address inside an IPv6 one: mapped, compatible, 6to4, NAT64
    or Teredo."""
    inner = int(draw(V4))
    low80 = draw(st.integers(0, 2**80 - 1))
    form = draw(st.sampled_from(["mapped", "compatible", "6to4", "nat64", "teredo"]))
    value = {
        "mapped": (0xFFFF << 32) | inner,
        "compatible": inner,
        "6to4": (0x2002 << 112) | (inner << 80) | low80,
        "nat64": (0x64FF9B << 96) | inner,
        # 2001:0:server:flags:port:client, the client's bits inverted
        "teredo": (0x20010000 << 96) | ((low80 >> 32) << 32) | (inner ^ 0xFFFFFFFF),
    }[form]
    return ipaddress.IPv6Address(value)


NOT_PUBLIC = V4 | ranges(NOT_PUBLIC_V6) | hiding_v4()
ZONES = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)


@st.composite
def spellings(draw: st.DrawFn, ip: Any) -> str:
    """`ip` as an address literal: IPv6 compressed, exploded, upper case, with a dotted
    IPv4 tail, with a zone id."""
    if ip.version == 4:
        return str(ip)
    form = draw(st.sampled_from(["compressed", "exploded", "dotted", "zero-padded"]))
    if form == "dotted":  # x:x:x:x:x:x:d.d.d.d
        head = ipaddress.IPv6Address(int(ip) & ~0xFFFFFFFF).exploded.rsplit(":", 2)[0]
        text = f"{head}:{ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)}"
    elif form == "zero-padded":
        text = ":".join(group.lstrip("0") or "0" for group in ip.exploded.split(":"))
    else:
        text = getattr(ip, form)
    if draw(st.booleans()):
        text = text.upper()
    if draw(st.booleans()):
        text += "%" + draw(ZONES)
    return text


@FAST
@given(NOT_PUBLIC.flatmap(lambda ip: st.tuples(st.just(ip), spellings(ip))))
def test_every_spelling_of_a_non_public_address_is_refused(given_ip: Any) -> None:
    ip, spelled = given_ip
    assert address_refusal(spelled) is not None, (ip, spelled)


@FAST
@given(in_network("fe80::/10"), ZONES)
def test_a_zone_scoped_link_local_address_is_refused(ip: Any, zone: str) -> None:
    assert address_refusal(f"{ip}%{zone}") == "link-local"


@FAST
@given(st.one_of(*(in_network(cidr) for cidr in PUBLIC)).flatmap(spellings))
def test_a_public_address_is_allowed(spelled: str) -> None:
    assert address_refusal(spelled) is None


def url_hosts(ip: Any) -> st.SearchStrategy[str]:
    """`ip` as a URL's host: bracketed IPv6 (zone as %25), IPv4 dotted, as one decimal,
    hex or octal number, hex parts or a short form (the resolver reads all of those)."""
    if ip.version == 6:
        return spellings(ip).map(lambda text: "[" + text.replace("%", "%25") + "]")
    n = int(ip)
    a, b, c, d = ip.packed
    return st.sampled_from(
        [
            str(ip),
            str(n),
            hex(n),
            "0" + oct(n)[2:],
            f"{hex(a)}.{hex(b)}.{hex(c)}.{hex(d)}",
            f"{a}.{(b << 16) | (c << 8) | d}",
            f"{a}.{b}.{(c << 8) | d}",
        ]
    )


class Counting:
    """A loopback HTTP server that counts requests: a refused fetch must make none."""

    def __init__(self) -> None:
        self.hits = 0
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                counter.hits += 1
                body = b"internal"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def counting() -> Iterator[Counting]:
    server = Counting()
    yield server
    server.server.shutdown()
    server.server.server_close()


def resolve(source: WebSource, url: str) -> str:
    return asyncio.run(source.resolve(SourceRef(source_id="web", uid=url)))


@FAST
@given(
    (NOT_PUBLIC | in_network("127.0.0.1/32")).flatmap(url_hosts)
    | st.sampled_from(["localhost", "LOCALHOST", "LocalHost", "0", "127.1", "0x7f.1"])
)
def test_a_url_to_a_non_public_host_is_refused_before_any_connection(
    counting: Counting, host: str
) -> None:
    source = WebSource(urls=["https://example.org/"], timeout=2)
    with pytest.raises(RefusedLocation, match="refused"):
        resolve(source, f"http://{host}:{counting.port}/secret")
    assert counting.hits == 0


@FAST
@given(st.one_of(*(in_network(cidr) for cidr in PUBLIC)).flatmap(url_hosts))
def test_a_url_to_a_public_address_passes_the_check(host: str) -> None:
    source = WebSource(urls=["https://example.org/"])
    url = httpx.URL(f"https://{host}/page")
    addresses = asyncio.run(source.check_url(url))
    assert len(addresses) == 1 and address_refusal(addresses[0]) is None


# --- CSV rows ------------------------------------------------------------------------------

CELLS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
NAMES = st.text(st.characters(codec="utf-8", exclude_characters="\x00\ufeff"), min_size=1).map(
    str.strip
)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    """A header of distinct names (the first is the key) and rows whose keys are
    distinct and not blank; cells hold anything: commas, quotes, newlines, unicode."""
    header = draw(st.lists(NAMES.filter(bool), min_size=1, max_size=5, unique=True))
    keys = draw(st.lists(CELLS.filter(str.strip), max_size=8, unique=True))
    rows = [
        [key, *draw(st.lists(CELLS, min_size=len(header) - 1, max_size=len(header) - 1))]
        for key in keys
    ]
    return header, rows


@FAST
@given(tables(), st.sampled_from([",", ";", "\t", "|"]), st.sampled_from([0, 1]))
def test_csv_source_rows_are_what_csv_writer_wrote(
    tmp_path_factory: pytest.TempPathFactory, table: Any, delimiter: str, quoting: int
) -> None:
    header, rows = table
    path: Path = tmp_path_factory.mktemp("csv") / "table.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:  # QUOTE_MINIMAL or _ALL
        csv.writer(handle, delimiter=delimiter, quoting=quoting).writerows([header, *rows])
    source = CSVSource(path, key=header[0], delimiter=delimiter)
    assert source.header == tuple(header)
    assert source.rows() == [dict(zip(header, row, strict=True)) for row in rows]
    for row in rows:
        assert source.row(row[0]) == dict(zip(header, row, strict=True))


@FAST
@given(
    st.lists(
        st.tuples(st.decimals(allow_nan=False, allow_infinity=False), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_prices_written_to_a_csv_file_are_read_back_exactly(
    tmp_path_factory: pytest.TempPathFactory, prices: list[tuple[Decimal, bool]]
) -> None:
    path: Path = tmp_path_factory.mktemp("csv") / "prices.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["item", "price"])
        for index, (price, grouped) in enumerate(prices):  # "1,234.5" or "1234.5"
            writer.writerow([f"item {index}", format(price, ",f" if grouped else "f")])
    rows = CSVSource(path, key="item").rows()
    assert column_values(rows, "price") == [price for price, _ in prices]


@FAST
@given(tables(), CELLS.filter(lambda cell: '"' not in cell), st.data())
def test_an_unbalanced_quote_is_an_error_never_a_cell_that_swallows_the_file(
    tmp_path_factory: pytest.TempPathFactory, table: Any, text: str, data: st.DataObject
) -> None:
    header, rows = table
    path: Path = tmp_path_factory.mktemp("csv") / "table.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
        cells = ["key", *["x"] * (len(header) - 1)]
        column = data.draw(st.integers(0, len(cells) - 1))
        cells[column] = '"' + text  # opened, never closed: it runs to the end of the file
        handle.write(",".join(cells) + "\r\n" + data.draw(st.sampled_from(["", "more\r\n"])))
    with pytest.raises(SourceError, match="never closed"):
        CSVSource(path, key=header[0])


# --- the calculator's pattern -----------------------------------------------------------

SPACES = st.sampled_from(["", " ", "  "])
NUMBERS = st.integers(0, 10**6).map(str) | st.decimals(0, 1000, places=2).map(str)
OPERATORS = st.sampled_from(["+", "-", "*", "/", "%", "//", "**"])


def joined(*parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(*parts).map("".join)


ARITHMETIC = joined(
    SPACES,
    st.recursive(
        joined(NUMBERS, SPACES),
        lambda inner: (
            joined(st.sampled_from("-+"), SPACES, inner)
            | joined(st.just("("), SPACES, inner, st.just(")"), SPACES)
            | joined(inner, OPERATORS, SPACES, inner)
        ),
        max_leaves=8,
    ),
)


def balanced(expression: str) -> bool:
    depth = 0
    for char in expression:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


@FAST
@given(ARITHMETIC)
def test_the_pattern_admits_arithmetic_the_calculator_reads(expression: str) -> None:
    assert re.fullmatch(EXPRESSION, expression), expression
    try:
        evaluate(expression)
    except CalculatorError as exc:  # arithmetic it will not do, never a misreading
        assert not str(exc).startswith("not an arithmetic expression"), (expression, exc)


@settings(FAST, max_examples=50)  # drawing from this regular expression is slow
@given(st.from_regex(EXPRESSION, fullmatch=True).filter(lambda e: len(e) <= MAX_LENGTH))
def test_what_the_pattern_admits_the_calculator_reads_when_parentheses_balance(
    expression: str,
) -> None:
    try:
        evaluate(expression)
    except CalculatorError as exc:
        misread = str(exc).startswith("not an arithmetic expression")
        assert not misread or not balanced(expression), (expression, exc)
