"""Run a batch and take each result as it finishes, with the asyncio client (README, "Waiting for results").

    .venv/bin/python examples/wait_for_many.py Ada Bo Cy

Needs a server with examples/hello.py registered and a worker; reads ./.flux/ as the CLI does.
"""

import asyncio
import json
import sys

from flux import aio


async def main(names: list[str]) -> None:
    async with aio.FluxClient() as client:
        runs = await client.map("hello", names)  # one durable commit for the batch
        async for done in client.as_completed(runs, timeout=60):  # one stream, completion order
            print(json.loads(done.output_json))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["World"]))
