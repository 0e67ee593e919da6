"""OpenEnv: DreamWeb-v0 / RealWeb-v0 served over OpenEnv's WebSocket protocol.

Serve (one env per client session, ``--max-sessions`` at once; sessions run on threads of one
process, so concurrent dream steps share batched model calls)::

    dynaweb-serve --env DreamWeb-v0 --port 8000 --max-sessions 8
    dynaweb-serve --env DreamWeb-v0 --env-kwargs '{"world_model": "tiny-random", "max_new_tokens": 32}'

Connect::

    from dynaweb_env.integrations.openenv import DynaWebClient, WebAction

    with DynaWebClient(base_url="http://127.0.0.1:8000").sync() as client:
        result = client.reset(seed=0, task="miniwob.click-button")
        while not result.done:
            result = client.step(WebAction(action="click [13]"))
        print(result.reward, result.observation.judged)

OpenEnv's HTTP ``/reset`` and ``/step`` build a new env for every request (its HTTP API is
stateless), so an episode cannot span HTTP calls: ``/step`` answers 409 with a message saying to
use the WebSocket client above. OpenEnv's ``GenericEnvClient`` works too
(``client.step({"action": "click [13]"})``), but its 60-second message timeout is shorter than a
dream step on a CPU can take (40–220 s with the default world model): pass ``message_timeout_s``.
:class:`DynaWebClient` defaults to 600 s.

``--env RealWeb-v0`` serves real browsers; several sessions at once need RealWeb-v0 to be safe
across threads (issue #18, item 3). Requires ``pip install 'dynaweb[openenv]'`` (``openenv-core``
0.3; the ``openenv`` 0.10 distribution of the same package cannot be installed beside verifiers
0.4, whose ``mcp==2.0.0`` pin conflicts with its ``fastmcp`` 3).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from ._common import WebEpisode, jsonable_info, library_import_error

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, Environment, Observation, State, create_app
except ImportError as error:  # tested by simulating both failures (tests/test_readme_examples.py)
    raise library_import_error(__name__, "OpenEnv", "openenv", "openenv", error) from error

#: Message timeout of :class:`DynaWebClient` (seconds): a CPU dream step can take minutes.
DEFAULT_CLIENT_TIMEOUT_S = 600.0


class WebAction(Action):
    """One agent action: a string in DynaWeb's grammar (``click [13]``) or a whole policy response.

    ``action`` is the schema's one required field, so a client that sends a bare reply as that field
    (verifiers' ``OpenEnvTaskset`` does) knows where it goes. Only a ``finish`` message may leave it out.
    """

    action: str = Field(description="an action such as 'click [13]', or a REASON/ACTION response")
    finish: bool = Field(
        default=False,
        description="end the episode now instead of acting; a dream is then judged (for turn caps); "
        "'action' may then be left out",
    )

    @model_validator(mode="before")
    @classmethod
    def _finish_needs_no_action(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("finish") is True and "action" not in data:
            return {**data, "action": ""}
        return data


class WebObservation(Observation):
    """The shared web observation, plus how the step ended (``done`` / ``reward`` are OpenEnv's own)."""

    goal: str = ""
    url: str = ""
    axtree: str = Field(default="", description="flattened accessibility tree, one '[bid] role name' node per line")
    last_action: str = ""
    last_action_error: str = ""
    truncated: bool = Field(default=False, description="the episode ended by a step limit")
    judged: bool = Field(default=False, description="reward is the dream's verdict (DreamWeb-v0)")
    judge_error: str = Field(
        default="", description="why the dream's judge gave no verdict (then judged is false and the reward 0 is none)"
    )
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info dict (JSON values only)")


class WebState(State):
    """Where the session's episode stands."""

    env_id: str = ""
    task_id: str = ""
    done: bool = False
    judged: bool = False
    judge_error: str = ""
    total_reward: float = 0.0


#: Why a step without a reset fails, and what an HTTP user should do instead.
STATELESS_HTTP_HINT = (
    "call reset() before step(). OpenEnv's HTTP /reset and /step build a new env for every request, so an "
    "episode cannot span HTTP calls: connect over the WebSocket (/ws), e.g. with "
    "dynaweb_env.integrations.openenv.DynaWebClient(base_url).sync(), which keeps one env per session"
)


class EpisodeNotStartedError(RuntimeError):
    """``step`` before ``reset`` in the same env (over HTTP: every ``/step``; ``make_app`` answers it with 409)."""


class DynaWebEnvironment(Environment[WebAction, WebObservation, WebState]):
    """An OpenEnv ``Environment`` over one DynaWeb gym env.

    Args:
        env_id: ``"DreamWeb-v0"`` or ``"RealWeb-v0"``.
        **env_kwargs: Passed to ``gym.make`` (e.g. ``world_model="tiny-random"``).

    ``reset(seed, episode_id, task=..., task_seed=..., step_index=...)`` pins the start state as the
    env's reset options do. ``step(WebAction(finish=True))`` ends the episode now; a dream is then
    judged. ``timeout_s`` is accepted for the protocol but not enforced here: backend calls carry
    their own timeouts (backend spec).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str = "DreamWeb-v0", **env_kwargs: Any):
        super().__init__()
        self._episode = WebEpisode(env_id, **env_kwargs)
        self._episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> WebObservation:
        observation, info = self._episode.reset(seed=seed, **kwargs)
        self._episode_id = episode_id
        return self._observation(observation, info, reward=None, done=False, truncated=False)

    def step(self, action: WebAction, timeout_s: float | None = None, **kwargs: Any) -> WebObservation:
        episode = self._episode
        if not episode.observation:
            raise EpisodeNotStartedError(STATELESS_HTTP_HINT)
        if action.finish or episode.done:
            # A finished (or already ended) episode reports its final return again.
            reward = episode.finish()
            return self._observation(episode.observation, episode.info, reward=reward, done=True, truncated=True)
        observation, reward, terminated, truncated, info = episode.step(action.action)
        return self._observation(observation, info, reward=reward, done=terminated or truncated, truncated=truncated)

    @property
    def state(self) -> WebState:
        episode = self._episode
        return WebState(
            episode_id=self._episode_id,
            step_count=episode.num_steps,
            env_id=episode.env_id,
            task_id=str(episode.info.get("task_id", "")),
            done=episode.done,
            judged=episode.judged,
            judge_error=str(episode.info.get("judge_error", "")),
            total_reward=episode.reward,
        )

    def close(self) -> None:
        self._episode.close()

    def _observation(
        self, observation: dict[str, str], info: dict[str, Any], reward: float | None, done: bool, truncated: bool
    ) -> WebObservation:
        return WebObservation(
            **observation,
            done=done,
            reward=reward,
            truncated=truncated,
            judged=bool(info.get("judged", False)),
            judge_error=str(info.get("judge_error", "")),
            info=jsonable_info(info),
        )


class DynaWebClient(EnvClient[WebAction, WebObservation, WebState]):
    """Typed OpenEnv client for a ``dynaweb-serve`` server (async; ``.sync()`` for a blocking one).

    Args:
        base_url: The server, e.g. ``"http://127.0.0.1:8000"``.
        message_timeout_s: Longest wait for one reply (default :data:`DEFAULT_CLIENT_TIMEOUT_S`).
        **kwargs: Passed to ``openenv.core.env_client.EnvClient``.
    """

    def __init__(self, base_url: str, message_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S, **kwargs: Any):
        super().__init__(base_url=base_url, message_timeout_s=message_timeout_s, **kwargs)

    def _step_payload(self, action: WebAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[WebObservation]:
        observation = WebObservation(
            **payload.get("observation", {}), done=payload.get("done", False), reward=payload.get("reward")
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> WebState:
        return WebState(**payload)


def make_app(env_id: str = "DreamWeb-v0", max_sessions: int = 8, **env_kwargs: Any):
    """The FastAPI app serving ``env_id`` (OpenEnv ``create_app``), one env per session."""
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
    DynaWebEnvironment(env_id, **env_kwargs).close()  # bad arguments fail here, not in the first session
    factory = functools.partial(DynaWebEnvironment, env_id, **env_kwargs)
    app = create_app(factory, WebAction, WebObservation, env_name=env_id, max_concurrent_envs=max_sessions)

    async def episode_not_started(request: Any, error: EpisodeNotStartedError) -> Any:
        from fastapi.responses import JSONResponse

        return JSONResponse(status_code=409, content={"detail": str(error)})

    app.add_exception_handler(EpisodeNotStartedError, episode_not_started)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """``dynaweb-serve``: serve a DynaWeb env over OpenEnv's protocol."""
    parser = argparse.ArgumentParser(prog="dynaweb-serve", description="Serve a DynaWeb env as an OpenEnv server.")
    parser.add_argument("--env", default="DreamWeb-v0", choices=["DreamWeb-v0", "RealWeb-v0"])
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=8, help="most client sessions (envs) at once")
    parser.add_argument(
        "--env-kwargs",
        default="{}",
        help='JSON keyword arguments for gym.make, e.g. \'{"world_model": "tiny-random"}\'',
    )
    args = parser.parse_args(argv)
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as error:
        parser.error(f"--env-kwargs is not valid JSON: {error}")
    if not isinstance(env_kwargs, dict):
        parser.error("--env-kwargs must be a JSON object")
    if args.max_sessions < 1:
        parser.error("--max-sessions must be >= 1")
    import uvicorn

    app = make_app(args.env, args.max_sessions, **env_kwargs)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "DEFAULT_CLIENT_TIMEOUT_S",
    "DynaWebClient",
    "DynaWebEnvironment",
    "EpisodeNotStartedError",
    "STATELESS_HTTP_HINT",
    "WebAction",
    "WebObservation",
    "WebState",
    "main",
    "make_app",
]
