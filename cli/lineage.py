"""``zmqdata lineage``: which source records made a step of a multi-rank read.

The dispatcher sends the registered pipeline; its splits that hold the step
run here (``service.lineage``), so the pipeline's functions must load in
this process (docs/accountable.md).
"""

from __future__ import annotations

import json
from typing import Any

import click
from zmqdata_cli.logs import verbose_option
from zmqdata_cli.status import dispatcher_address, dispatcher_option, timeout_option

from zmqdata import service
from zmqdata._client.api import registered_dataset
from zmqdata.errors import ZmqDataError


def render(rows: list[dict[str, Any]]) -> str:
    """Each position's records, one line per record.

    >>> print(render([{"position": 7, "consumer_index": 1, "step": 3, "sources": [
    ...     {"source": 0, "index": 12, "path": "a.parquet", "record": 2}]}]))
    rank 1, step 3 (position 7): 1 record
      source 0  index 12  a.parquet  record 2
    """
    lines = []
    for row in rows:
        count = len(row["sources"])
        lines.append(
            f"rank {row['consumer_index']}, step {row['step']} "
            f"(position {row['position']}): {count} record{'s' * (count != 1)}"
        )
        for record in row["sources"]:
            line = f"  source {record['source']}  index {record['index']}"
            if "path" in record:
                line += f"  {record['path']}"
            if "record" in record:
                line += f"  record {record['record']}"
            lines.append(line)
    return "\n".join(lines)


@click.command()
@verbose_option  # type: ignore[untyped-decorator]
@dispatcher_option  # type: ignore[untyped-decorator]
@click.option("--dataset-id", required=True, help="The registered dataset.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=None,
    help="The job's seed [default: none, splits in source order].",
)
@click.option(
    "--ranks",
    type=click.IntRange(min=1),
    required=True,
    help="The job's num_consumers (R).",
)
@click.option(
    "--step",
    type=click.IntRange(min=0),
    required=True,
    help="The step: each rank's element number STEP of the epoch.",
)
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    default=None,
    help="Only this rank's element [default: every rank's].",
)
@click.option(
    "--epoch",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The epoch (the job's k-th iter() reads epoch k).",
)
@click.option("--json", "as_json", is_flag=True, help="Print service.lineage()'s list.")
@timeout_option  # type: ignore[untyped-decorator]
def lineage(
    address: str | None,
    dataset_id: str,
    seed: int | None,
    ranks: int,
    step: int,
    rank: int | None,
    epoch: int,
    as_json: bool,
    timeout: float,
) -> None:
    """Print the source records of step STEP of a multi-rank read (each rank's)."""
    if rank is not None and rank >= ranks:
        raise click.BadParameter(
            f"{rank} is not a rank of {ranks}", param_hint="--rank"
        )
    first = step * ranks + (0 if rank is None else rank)
    last = first + (ranks if rank is None else 1)
    try:
        dataset = registered_dataset(dispatcher_address(address), dataset_id, timeout)
        rows = service.lineage(dataset, seed, ranks, first, last, epoch)
    except (ZmqDataError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(json.dumps(rows, indent=2) if as_json else render(rows))
