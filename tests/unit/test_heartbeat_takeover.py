"""A running attempt held again (a restart, its worker moved to another replica) has its silence
clock start over: heartbeat times are kept in memory only (transitions/timing.py)."""

from __future__ import annotations

import pytest

from flux.domain.execution import State
from flux.domain.policy import Policy
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from tests.unit.harness import Flux, settled

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
async def flux():
    f = await Flux().start()
    yield f
    await f.d.stop()


async def test_a_recovered_attempt_counts_its_silence_from_when_it_is_held_again(flux) -> None:
    declared = WorkflowRecord(
        "job", 0, "", "main", ResourceRequest(cpu=1), {}, 1, policy=Policy(heartbeat_timeout=30.0)
    )
    await flux.d.register_workflows("job.py", "# job\n", [declared])
    w = await flux.worker()
    execution_id = await flux.run()
    running = w.claim(execution_id)
    assert running.state is State.RUNNING
    # Held again 100 s into the attempt by a server that never heard its beats.
    flux.clock.advance(100)
    flux.d.timing.forget(execution_id)
    flux.d.timing.recovered(flux.get(execution_id))
    flux.expire(1)  # the timer armed at the claim is long due: it is armed again, nothing stops
    await settled()
    assert not flux.d.timing.is_stopping(flux.get(execution_id))
    flux.expire(30)  # silent for 30 s since it was held again
    await settled()
    assert flux.d.timing.is_stopping(flux.get(execution_id))
