"""Admission follows seats: ``server.max_server_seats`` caps the seats of all connections, and
``/readyz`` says ``full`` while it is reached, so new cars go to another pod instead of getting 1013;
``/livez`` on a port of its own answers while the loop is busy."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets

from kitt_stt.client.session import connect
from tests.helpers import collect_until, free_port, of_type, run_server


async def test_seat_cap_refuses_seats_and_turns_readiness_full(tmp_path, model_cache) -> None:
    liveness = free_port()
    overrides = {"server": {"max_server_seats": 2, "max_seats": 4, "liveness_port": liveness}}
    with run_server(tmp_path, model_cache, overrides) as server:
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"{server.http}/readyz")).json()["status"] == "ready"
            async with connect(server.url) as car:
                await car.start(seats=["driver", "passenger"])
                await car.ping("after-start")
                await collect_until(car, lambda frames: bool(of_type(frames, "pong")), timeout=5)
                full = await http.get(f"{server.http}/readyz")
                assert (full.status_code, full.json()["status"]) == (503, "full")
                # a seat beyond the cap on a connection that holds seats: refused, the session goes on
                await car.send_audio(bytes(640), seat="rear")
                frames = await collect_until(car, lambda frames: bool(of_type(frames, "error")), timeout=5)
                refused = of_type(frames, "error")[0]
                assert (refused["code"], refused["seat"], refused["fatal"]) == ("overloaded", "rear", False)
                assert "max_server_seats" in refused["message"]
                # a new car is refused at once with 1013: it holds no seat and gets none here
                with pytest.raises(ConnectionError, match="overloaded"):
                    async with connect(server.url):
                        pass
                alive = await http.get(f"http://127.0.0.1:{liveness}/livez")
                assert alive.status_code == 200 and alive.json()["workers"][0]["seats"] == 2
            for _ in range(50):  # the car left: its seats are free again
                if (await http.get(f"{server.http}/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert (await http.get(f"{server.http}/readyz")).json()["status"] == "ready"
            metrics = (await http.get(f"{server.http}/metrics")).text
            assert 'kitt_sessions_refused_total{reason="seats"} 1.0' in metrics
            assert "kitt_event_loop_lag_seconds " in metrics


async def test_first_seat_refused_closes_with_1013(tmp_path, model_cache) -> None:
    """A connection accepted just before the server filled up, whose first seat finds no room:
    told to go elsewhere (fatal ``overloaded``, close 1013) rather than kept open seatless."""
    with run_server(tmp_path, model_cache, {"server": {"max_server_seats": 1}}) as server:
        async with connect(server.url) as holder, connect(server.url) as late:
            await holder.send_audio(bytes(640), seat="driver")
            await holder.ping(1)
            await collect_until(holder, lambda frames: bool(of_type(frames, "pong")), timeout=5)
            await late.send_audio(bytes(640), seat="driver")
            error = await asyncio.wait_for(late.receive(), 5)
            assert (error["code"], error["fatal"]) == ("overloaded", True)
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(late.receive(), 5)
            assert late.websocket.close_code == 1013
