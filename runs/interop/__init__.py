"""Studio records in other evaluation stacks' formats (the Inspect AI log export). The adapters that
play a version inside those stacks (Inspect tasks, verifiers tasksets) are part of the installable
client: studio_client.inspect_task and studio_client.verifiers_taskset."""
import importlib.util

# The Inspect AI log export needs inspect-ai, which the runtime install leaves out (the interop extra).
INSPECT_MISSING = ("the Inspect AI log export needs inspect-ai, which this studio was installed without:"
                   " install the interop extra (pip install 'environment-studio[interop]' or make setup-test)")


def inspect_installed() -> bool:
    return importlib.util.find_spec("inspect_ai") is not None
