"""Studio records in other evaluation stacks' formats (the Inspect AI log export). The adapters that
play a version inside those stacks (Inspect tasks, verifiers tasksets) are part of the installable
client: studio_client.inspect_task and studio_client.verifiers_taskset."""
