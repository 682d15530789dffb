"""The Prometheus text format (0.0.4) of metric families, byte for byte what
``prometheus_client.generate_latest`` writes, in less of its time.

A fleet scrape holds thousands of samples. ``generate_latest`` checks every label name
against the UTF-8 naming rules and escapes it on every sample; the label names of one family
are the same on every sample, so here they are checked and sorted once per scrape and
family. Anything this writer does not know (timestamps, exemplars, OpenMetrics-only samples,
names outside the legacy character set) goes through ``generate_latest`` itself, so the
output never differs.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# gzip.compress's default level 9 took 11.6 ms for a 3-target scrape (203 KiB -> 9.5 KiB);
# level 1 takes 0.9 ms for 13 KiB.
GZIP_LEVEL = 1

_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LEGACY_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Samples that generate_latest moves into a family of their own.
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPES = {"counter": "counter", "gauge": "gauge", "info": "gauge", "histogram": "histogram"}


class _One:
    """A registry of one family, for the families handed to generate_latest."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self.metric]


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


# What was checked of names, kept: a scrape writes a thousand models' samples in parts, and
# their few sample names and sets of label names would be checked again in every part.
# Sample name -> whether this writer writes it (a legacy name, not moved to a family of its own).
_SAMPLE_NAMES: dict[str, bool] = {}
# Label names as given -> sorted, or None where one is not a legacy name.
_LABEL_ORDERS: dict[tuple[str, ...], tuple[str, ...] | None] = {}
# Names are few in practice; past this many, checks are not kept (memory stays bounded).
_KEPT_CHECKS = 4096


def _plain_name(name: str) -> bool:
    plain = _SAMPLE_NAMES.get(name)
    if plain is None:
        plain = not name.endswith(_OM_SUFFIXES) and _LEGACY_NAME.match(name) is not None
        if len(_SAMPLE_NAMES) < _KEPT_CHECKS:
            _SAMPLE_NAMES[name] = plain
    return plain


def _label_order(keys: tuple[str, ...]) -> tuple[str, ...] | None:
    if keys in _LABEL_ORDERS:
        return _LABEL_ORDERS[keys]
    order = tuple(sorted(keys))
    checked = order if all(_LEGACY_LABEL.match(k) for k in order) else None
    if len(_LABEL_ORDERS) < _KEPT_CHECKS:
        _LABEL_ORDERS[keys] = checked
    return checked


def _plain(metric: Metric) -> bool:
    """Whether this writer renders the family exactly as generate_latest would."""
    if metric.type not in _TYPES or not _LEGACY_NAME.match(metric.name):
        return False
    return all(
        s.timestamp is None
        and s.exemplar is None
        and getattr(s, "native_histogram", None) is None
        and _plain_name(s.name)
        for s in metric.samples
    )


def render(metrics: Iterable[Metric]) -> bytes:
    """The text format of ``metrics``, equal to ``generate_latest`` of a registry of them."""
    return "".join(texts(metrics)).encode("utf-8")


def texts(metrics: Iterable[Metric]) -> list[str]:
    """Each family's text, in order: ``render`` joined, or ``Gzip.compress``'s input."""
    return [_text(metric) for metric in metrics]


def prerender(metric: Metric) -> Metric:
    """The family with its text kept, for a family that no longer changes: ``render``
    then writes the kept text (the background reader renders off the scrape path)."""
    metric.prerendered = _text(metric)  # type: ignore[attr-defined]
    return metric


def _text(metric: Metric) -> str:
    kept: str | None = getattr(metric, "prerendered", None)
    if kept is not None:
        return kept
    text = _family(metric)
    return text if text is not None else generate_latest(_One(metric)).decode("utf-8")


def _family(metric: Metric) -> str | None:
    """One family's lines, or None where a label name is outside the legacy set."""
    lines = sample_lines(metric)
    return None if lines is None else header(metric) + lines


def header(metric: Metric) -> str:
    """The family's HELP and TYPE lines."""
    name = metric.name
    suffix = {"counter": "_total", "info": "_info"}.get(metric.type, "")
    help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name}{suffix} {help_text}\n# TYPE {name}{suffix} {_TYPES[metric.type]}\n"


def sample_lines(metric: Metric) -> str | None:
    """The lines of the family's samples, without its header; None where this writer does not
    write them as generate_latest would. A sample's line depends on that sample alone, so the
    lines of a family's parts, joined, are the lines of the whole."""
    if not _plain(metric):
        return None
    lines = []
    for sample in metric.samples:
        labels = sample.labels
        order = _label_order(tuple(labels))
        if order is None:
            return None
        value = floatToGoString(sample.value)
        if order:
            body = ",".join([f'{k}="{labels[k]}"' for k in order])
            if "\\" in body or "\n" in body or body.count('"') != 2 * len(order):
                body = ",".join([f'{k}="{_escape(labels[k])}"' for k in order])
            lines.append(f"{sample.name}{{{body}}} {value}\n")
        else:
            lines.append(f"{sample.name} {value}\n")
    return "".join(lines)


def assembled(metric: Metric, parts: list[str]) -> Metric:
    """The family (its samples already gathered) with its text kept as its header and the
    ``sample_lines`` of its parts, rendered before: ``render`` then writes that text."""
    return kept(metric, header(metric) + "".join(parts))


def kept(metric: Metric, text: str) -> Metric:
    """The family with ``text`` kept as its text (made by ``assembled`` for the same
    samples before): ``render`` then writes it."""
    metric.prerendered = text  # type: ignore[attr-defined]
    return metric


def gzip_accepted(accept_encoding: str) -> bool:
    return any(part.split(";")[0].strip() == "gzip" for part in accept_encoding.split(","))


# gzip's header: deflate, no flags, no time, "fastest" (level 1), unknown OS (RFC 1952).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"
# The last deflate block: empty, final (what a compressor's Z_FINISH writes with no input).
_DEFLATE_END = b"\x03\x00"


class Gzip:
    """gzip of a scrape, family by family, each family compressed once for as long as its
    text stays the same.

    Each text is deflated on its own and flushed with Z_FULL_FLUSH, which ends it on a byte
    boundary with the window reset, so the pieces joined are one valid deflate stream and a
    piece does not depend on what came before it. A family whose text is the one of the
    last scrape (the collector keeps an unchanged family's text object) is not compressed
    again: at a thousand models, compressing the whole text cost a scrape more than the
    rest of it together.
    """

    def __init__(self) -> None:
        # text -> (its UTF-8 bytes, their deflate blocks), for the texts of the last scrape
        self._kept: dict[str, tuple[bytes, bytes]] = {}
        # Texts compressed so far, counted for the test that keeps unchanged ones from it.
        self.pieces_compressed = 0

    def compress(self, texts: list[str]) -> bytes:
        kept, fresh = self._kept, dict[str, tuple[bytes, bytes]]()
        crc, size, out = 0, 0, [_GZIP_HEADER]
        for text in texts:
            piece = fresh.get(text) or kept.get(text)
            if piece is None:
                raw = text.encode("utf-8")
                deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
                piece = (raw, deflate.compress(raw) + deflate.flush(zlib.Z_FULL_FLUSH))
                self.pieces_compressed += 1
            fresh[text] = piece
            crc = zlib.crc32(piece[0], crc)
            size += len(piece[0])
            out.append(piece[1])
        out += [_DEFLATE_END, struct.pack("<II", crc, size & 0xFFFFFFFF)]
        self._kept = fresh  # one assignment: a scrape on another thread sees one dict
        return b"".join(out)


def compress(body: bytes) -> bytes:
    """gzip of one body (``Gzip`` without keeping anything)."""
    return Gzip().compress([body.decode("utf-8")])
