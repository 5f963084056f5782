"""The harness: the background loop that turns delegations into work items, journals
them, dispatches them to capabilities and returns their results to the frontend."""
