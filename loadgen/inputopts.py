"""What a load's requests hold, as one set of options shared by every command that makes
load: loadgen's scenarios, ``capacity`` and ``--processes``, the advisor's ``--probe`` and
``--verify``, and the dashboard's load form. The flags follow perf_analyzer's where it has
one (``--shape``, ``--input-data``, ``--string-length``, ``--string-data``).

    opts = InputOptions.from_args(args)      # argparse, after add_arguments(parser)
    opts = InputOptions.from_texts(shape=["ids=4:64"], value_range=["ids=0:30000"])
    params = opts.apply(params)              # onto a RunParams
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

from loadgen.clients.payloads import Dim, parse_dims
from loadgen.errors import LoadgenError
from loadgen.results.params import RunParams

DATA_ORDERS = ("order", "random")


@dataclass(frozen=True)
class InputOptions:
    """The input fields of a RunParams, parsed and checked for form (the model checks the
    rest when the run is prepared)."""

    shapes: tuple[tuple[str, tuple[Dim, ...]], ...] = ()
    dtypes: tuple[tuple[str, str], ...] = ()
    ranges: tuple[tuple[str, tuple[float, float]], ...] = ()
    input_data: str = "random"
    data_order: str = "order"
    string_length: tuple[int, int] = (16, 16)
    string_data: str | None = None

    def apply(self, params: RunParams) -> RunParams:
        return replace(params, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> InputOptions:
        return cls.from_texts(
            shape=args.shape,
            dtype=args.dtype,
            value_range=args.range,
            input_data=args.input_data,
            data_order=args.data_order,
            string_length=args.string_length,
            string_data=args.string_data,
        )

    @classmethod
    def from_texts(
        cls,
        shape: Sequence[str] = (),
        dtype: Sequence[str] = (),
        value_range: Sequence[str] = (),
        input_data: str = "random",
        data_order: str = "order",
        string_length: str = "16",
        string_data: str | None = None,
    ) -> InputOptions:
        """The options from their texts as typed on a command line or in a form."""
        shapes = {k: parse_dims(v, f"--shape {k}") for k, v in pairs(shape, "--shape").items()}
        ranges = {k: _range(k, v) for k, v in pairs(value_range, "--range").items()}
        if data_order not in DATA_ORDERS:
            raise LoadgenError(f"--data-order {data_order!r}: use order or random")
        source = input_data.strip() or "random"
        if source not in ("random", "zero") and not Path(source).exists():
            raise LoadgenError(
                f"--input-data {source}: no such file or folder; use random, zero, a "
                "perf_analyzer JSON data file or a folder of NAME.npy files"
            )
        return cls(
            shapes=tuple(shapes.items()),
            dtypes=tuple(pairs(dtype, "--dtype").items()),
            ranges=tuple(ranges.items()),
            input_data=source,
            data_order=data_order,
            string_length=_lengths(string_length),
            string_data=string_data,
        )


def pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    """NAME=VALUE items; one item may hold several separated by spaces or semicolons (a
    form's field, a Kubernetes env value), and an empty one holds none."""
    out = {}
    for item in (i for text in items for i in text.replace(";", " ").split()):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise LoadgenError(f"{flag} {item!r}: use NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def _range(name: str, text: str) -> tuple[float, float]:
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        sep = ""
    if not sep or not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise LoadgenError(
            f"--range {name}={text}: use NAME=LO:HI with LO < HI (values drawn from [LO, HI)), "
            "e.g. ids=0:30000"
        )
    return lo, hi


def _lengths(text: str) -> tuple[int, int]:
    lo_text, _, hi_text = str(text).partition(":")
    try:
        lo, hi = int(lo_text), int(hi_text or lo_text)
    except ValueError:
        lo, hi = -1, -1
    if not 0 <= lo <= hi <= 1 << 20:
        raise LoadgenError(
            f"--string-length {text!r}: use N or LO:HI characters (0 <= LO <= HI <= 1048576)"
        )
    return lo, hi


def add_arguments(p: argparse._ActionsContainer) -> None:
    """The input options, on any parser that makes load."""
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2",
        help="dims of an input without the batch dim; needed for variable (-1) dims; a dim "
        "may be a range LO:HI drawn per request (ids=4:64)",
    )
    p.add_argument(
        "--dtype",
        action="append",
        default=[],
        metavar="NAME=TYPE",
        help="expected datatype of an input (checked against the metadata)",
    )
    p.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="NAME=LO:HI",
        help="generated values of an input drawn from [LO, HI) (ids=0:30000)",
    )
    p.add_argument(
        "--input-data",
        default="random",
        metavar="random|zero|FILE|DIR",
        help="random (default), zero, perf_analyzer's JSON data file, or a folder of NAME.npy",
    )
    p.add_argument(
        "--data-order",
        choices=DATA_ORDERS,
        default="order",
        help="take the data's requests in order (default, cycled) or at random with --seed",
    )
    p.add_argument(
        "--string-length",
        default="16",
        metavar="N|LO:HI",
        help="characters of generated strings for BYTES inputs (16); a range is drawn per string",
    )
    p.add_argument(
        "--string-data",
        default=None,
        metavar="TEXT",
        help="send this string in every element of BYTES inputs",
    )
