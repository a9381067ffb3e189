"""Schedules through a real server and worker on SQLite: ticks fire once each under ids derived
from their ticks, overlap and catch-up hold across a restart, bad terms are refused naming the
field at every entry point (client, CLI, HTTP), and pause/resume/trigger/delete do what they say."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flux.errors import AlreadyExists, InvalidArgument, NotFound
from flux.testing import Cluster, eventually

pytestmark = pytest.mark.integration

RUNS = "SELECT tick, execution_id, result FROM schedule_runs WHERE schedule = ? ORDER BY tick"


def _fired(cluster: Cluster, name: str) -> list[tuple[float, str, str]]:
    return [row for row in cluster.query(RUNS, name) if row[2] == "fired"]


def test_a_schedule_fires_each_tick_once_and_shows_its_runs(cluster: Cluster) -> None:
    cluster.start_worker("w1", "--capacity", "4")
    schedules = cluster.client.schedules
    created = schedules.create("tick", workflow="echo", every="1s", input={"n": 1}, overlap="allow")
    assert created.next_tick is not None and created.next_tick > time.time() - 1
    runs = eventually(
        lambda: (r := _fired(cluster, "tick")) and len(r) >= 3 and r, timeout=30, what="3 ticks"
    )
    for tick, execution_id, _ in runs:
        assert execution_id == f"sch-tick-{tick:.0f}"
    ticks = [tick for tick, _, _ in runs]
    assert all(b - a == 1 for a, b in zip(ticks, ticks[1:], strict=False)), ticks
    finals = cluster.wait_all([runs[0][1]], timeout=30)
    assert json.loads(finals[0].output_json)["input"] == {"n": 1}
    shown = schedules.show("tick")
    assert shown.runs and shown.runs[0].execution_id.startswith("sch-tick-")
    assert {r.state for r in shown.runs} <= {"CREATED", "SCHEDULED", "RUNNING", "COMPLETED"}
    with pytest.raises(AlreadyExists):
        schedules.create("tick", workflow="echo", every="1s")
    schedules.pause("tick")
    paused_at = len(_fired(cluster, "tick"))
    time.sleep(2.5)
    assert len(_fired(cluster, "tick")) <= paused_at + 1  # a tick in flight as it paused
    assert schedules.list()[0].paused
    manual = schedules.trigger("tick")
    assert manual.manual and "-m" in manual.execution_id
    assert cluster.wait_all([manual.execution_id], timeout=30)[0].output_json
    if cluster.gateway_url:
        import httpx

        metrics = httpx.get(f"{cluster.gateway_url}/metrics", timeout=10, trust_env=False).text
        fired = [
            line
            for line in metrics.splitlines()
            if line.startswith('flux_schedule_ticks_total{result="fired"}')
        ]
        assert fired and float(fired[0].split()[-1]) >= 3, fired
        assert 'flux_schedule_ticks_total{result="manual"} 1.0' in metrics
        assert 'flux_schedules{state="paused"} 1.0' in metrics
    schedules.delete("tick")
    with pytest.raises(NotFound):
        schedules.show("tick")


def test_bad_terms_are_refused_naming_the_field(cluster: Cluster) -> None:
    schedules = cluster.client.schedules
    cases = [
        ({"workflow": "echo", "cron": "every five minutes"}, "cron must be a cron expression of five fields"),
        ({"workflow": "echo", "cron": "*/5 * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"workflow": "echo", "every": "soon"}, "every must be a duration"),
        ({"workflow": "echo", "every": "1s", "cron": "* * * * *"}, "give exactly one of cron"),
        ({"workflow": "echo", "every": "1s", "overlap": "maybe"}, "overlap must be one of skip"),
        ({"workflow": "echo", "every": "1s", "catch_up": "some"}, "catch_up must be a number of ticks"),
        ({"workflow": "nope", "every": "1s"}, "workflow: workflow 'nope' is not registered"),
    ]
    for terms, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            schedules.create("bad", **terms)
    assert schedules.list() == []


def test_the_cli_and_http_create_apply_show_and_refuse(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_worker("w1", "--capacity", "4")
    created = cluster.flux(
        "schedule", "create", "often", "--workflow", "echo", "--every", "1s", "--input", '{"k": 2}'
    )
    assert created.returncode == 0, created.stderr
    assert (
        "schedule often created in tenant default: runs echo every 1s, overlap skip, catch-up 1"
        in created.stdout
    )
    bad = cluster.flux("schedule", "create", "x", "--workflow", "echo", "--cron", "61 * * * *")
    assert bad.returncode != 0 and "cron must be a cron expression of five fields" in bad.stderr, bad.stderr
    bad = cluster.flux("schedule", "create", "x", "--workflow", "echo", "--every", "2x")
    assert bad.returncode != 0 and "every must be a duration" in bad.stderr, bad.stderr
    bad = cluster.flux(
        "schedule", "create", "x", "--workflow", "echo", "--cron", "* * * * *", "--timezone", "Nowhere"
    )
    assert bad.returncode != 0 and "timezone must be an IANA time zone name" in bad.stderr, bad.stderr
    bad = cluster.flux("schedule", "create", "x", "--workflow", "ghost", "--every", "1s")
    assert bad.returncode != 0 and "workflow 'ghost' is not registered" in bad.stderr, bad.stderr
    path = tmp_path / "schedules.yaml"
    path.write_text(
        "schedules:\n  - name: nightly\n    workflow: echo\n    cron: '0 2 * * *'\n    timezone: Europe/Paris\n"
        "  - name: poll\n    workflow: echo\n    every: 1m\n    catch_up: none\n"
    )
    applied = cluster.flux("schedule", "apply", str(path))
    assert applied.returncode == 0, applied.stderr
    assert "schedule nightly applied: runs echo cron '0 2 * * *' (Europe/Paris)" in applied.stdout
    listed = json.loads(cluster.flux("schedule", "list", "--json").stdout)["schedules"]
    assert [s["name"] for s in listed] == ["nightly", "often", "poll"]
    nightly = listed[0]
    # 02:00 in Paris is 01:00 or 00:00 UTC, by the season.
    assert (
        time.gmtime(nightly["next_tick"]).tm_hour in (0, 1) and time.gmtime(nightly["next_tick"]).tm_min == 0
    )
    eventually(lambda: len(_fired(cluster, "often")) >= 2, timeout=30, what="two ticks of often")
    shown = cluster.flux("schedule", "show", "often")
    assert shown.returncode == 0 and "sch-often-" in shown.stdout, shown.stdout
    triggered = cluster.flux("schedule", "trigger", "often")
    assert triggered.returncode == 0 and triggered.stdout.startswith("sch-often-m"), triggered.stdout
    assert cluster.flux("schedule", "pause", "often").returncode == 0
    assert "paused" in cluster.flux("schedule", "list").stdout
    assert "next tick" in cluster.flux("schedule", "resume", "often").stdout
    assert cluster.flux("schedule", "delete", "often").returncode == 0
    gone = cluster.flux("schedule", "show", "often")
    assert gone.returncode != 0 and "does not exist" in gone.stderr
    if not cluster.gateway_url:
        return
    import httpx

    from flux.security import Role

    headers = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
    with httpx.Client(base_url=cluster.gateway_url, timeout=10, trust_env=False, headers=headers) as http:
        made = http.post("/schedules", json={"name": "web", "workflow": "echo", "every": "1h"})
        assert made.status_code == 200 and made.json()["schedule"]["tenant"] == "default", made.text
        assert (
            http.post("/schedules", json={"name": "web", "workflow": "echo", "every": "1h"}).status_code
            == 409
        )
        refused = http.post("/schedules", json={"name": "w2", "workflow": "echo", "cron": "nope"})
        assert refused.status_code == 422 and "cron must be" in refused.text, refused.text
        assert http.post("/schedules/web/pause").json()["schedule"]["paused"] is True
        assert http.post("/schedules/web/resume").json()["schedule"]["paused"] is False
        run = http.post("/schedules/web/trigger").json()["run"]
        assert run["execution_id"].startswith("sch-web-m") and run["manual"] is True, run
        shown = http.get("/schedules/web")
        assert shown.status_code == 200 and len(shown.json()["runs"]) == 1, shown.text
        put = http.put("/schedules", json={"schedules": [{"name": "web", "workflow": "echo", "every": "2h"}]})
        assert put.status_code == 200, put.text
        assert http.delete("/schedules/web").status_code == 200
        assert http.get("/schedules/web").status_code == 404
        assert http.get("/schedules", params={"tenant": "nobody"}).status_code == 404


def test_the_asyncio_client_manages_schedules(cluster: Cluster) -> None:
    import asyncio

    from flux.aio import FluxClient as AsyncFluxClient

    async def scenario() -> None:
        async with AsyncFluxClient(
            cluster.address, timeout=10, credentials=cluster.client.credentials
        ) as aio:
            made = await aio.schedules.create("a", workflow="echo", cron="*/5 * * * *", timezone="Asia/Tokyo")
            assert made.schedule.timezone == "Asia/Tokyo" and made.next_tick is not None
            assert [s.name for s in await aio.schedules.list()] == ["a"]
            assert (await aio.schedules.pause("a")).paused
            assert not (await aio.schedules.resume("a")).paused
            run = await aio.schedules.trigger("a")
            assert run.manual and (await aio.schedules.show("a")).runs[0].execution_id == run.execution_id
            await aio.schedules.apply([{"name": "a", "workflow": "echo", "every": "1h"}])
            assert (await aio.schedules.show("a")).schedule.every == 3600
            await aio.schedules.delete("a")
            with pytest.raises(InvalidArgument, match="schedules\\[0\\]: cron must be"):
                await aio.schedules.apply([{"name": "b", "workflow": "echo", "cron": "x"}])

    asyncio.run(scenario())
