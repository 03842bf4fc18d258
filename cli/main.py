"""``zmqdata``: the command-line entry point.

>>> from click.testing import CliRunner
>>> CliRunner().invoke(main, ["--version"]).output.startswith("zmqdata, version")
True
"""

from __future__ import annotations

import click
from zmqdata_cli.daemons import dispatcher, worker
from zmqdata_cli.keygen import keygen
from zmqdata_cli.lifecycle import down, stop
from zmqdata_cli.lineage import lineage
from zmqdata_cli.logs import configure_logging
from zmqdata_cli.status import status
from zmqdata_cli.trace import trace
from zmqdata_cli.up import up

from zmqdata._version import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION, __version__

VERSION_MESSAGE = (
    f"%(prog)s, version %(version)s\nprotocol v{PROTOCOL_VERSION} "
    f"(accepts peers of v{OLDEST_PROTOCOL_VERSION} to v{PROTOCOL_VERSION})"
)
"""``zmqdata --version``: the package and the wire-protocol versions."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="zmqdata", message=VERSION_MESSAGE)
@click.option(
    "-v", "--verbose", is_flag=True, help="Log at DEBUG level (also after the command)."
)
def main(verbose: bool) -> None:
    """zmqdata: a disaggregated input-pipeline service on ZeroMQ."""
    configure_logging("DEBUG" if verbose else "INFO")


main.add_command(dispatcher)
main.add_command(worker)
main.add_command(up)
main.add_command(status)
main.add_command(trace)
main.add_command(lineage)
main.add_command(keygen)
main.add_command(stop)
main.add_command(down)

if __name__ == "__main__":
    main()
