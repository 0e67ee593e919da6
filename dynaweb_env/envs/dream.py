"""DreamWeb-v0: web tasks played against an LLM web world model instead of a browser.

The step logic lives in :class:`DreamDynamics`, which advances a *batch* of dream episodes with one
world-model call and one judge call. :class:`DreamWebEnv` drives it with a batch of one and
:class:`~dynaweb_env.envs.dream_vector.DreamWebVectorEnv` with a batch of ``num_envs``, so the two
envs cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium as gym

from ..action_rules import BLANK_PAGE_AXTREE
from ..llm.base import GenerationError
from ..navigation import NavigationPolicy, absolute_url
from ..observation import truncate_axtree
from ..spaces import MAX_TEXT_LENGTH, web_action_space, web_observation_space
from ..world_model.consistency import page_inconsistencies, repair_page, write_typed_text_in
from ..world_model.judge import JudgeRequest, JudgeStep, TrajectoryJudge, judge_step
from ..world_model.model import WebWorldModel
from . import END_REASONS, EPISODE_ENDED
from .dream_episode import (
    DreamEpisode,
    generation_budgets,
    leaves_task_page,
    read_dream_action,
    render_dream,
    world_model_request,
)
from .dream_guards import RewardGuards, gate_termination, predict_with_disagreement, score_groups
from .dream_setup import (  # noqa: F401  (build_dynamics, load_task_start_states, resolve_world_model: re-exported)
    RENDER_MODES,
    DreamSettings,
    build_dynamics,
    choose_start_state,
    load_task_start_states,
    resolve_world_model,
    takes_dream_settings,
)


class DreamDynamics:
    """Advances batches of dream episodes: the transition and reward logic of DreamWeb-v0.

    Args:
        world_model: Predicts next pages; or a function building it, called on the first step that
            needs a prediction (so steps with only malformed actions never load a model).
        judge: Scores finished dreams; or a function building it, called on first use.
        dream_length: Most steps per dream (malformed actions count).
        guards: The reward guards (:mod:`~dynaweb_env.envs.dream_guards`; default: none). Judge votes are
            the judge's own setting (``TrajectoryJudge(votes=...)``); the rest apply here.
        action_set: ``"paper"`` or ``"browsergym"``: the grammar actions are read in (both give the same actions).
    """

    def __init__(
        self,
        world_model: WebWorldModel | Callable[[], WebWorldModel],
        judge: TrajectoryJudge | Callable[[], TrajectoryJudge],
        dream_length: int,
        guards: RewardGuards | None = None,
        action_set: str = "paper",
    ):
        self._world_model = world_model
        self._judge = judge
        self.dream_length = dream_length
        self.guards = guards or RewardGuards()
        #: The grammar actions are read in (:data:`~dynaweb_env.browsergym_actions.ACTION_SETS`).
        self.action_set = action_set

    @property
    def world_model(self) -> WebWorldModel:
        if not isinstance(self._world_model, WebWorldModel):
            self._world_model = self._world_model()
        return self._world_model

    @property
    def judge(self) -> TrajectoryJudge:
        if not isinstance(self._judge, TrajectoryJudge):
            self._judge = self._judge()
        return self._judge

    def wrap_models(self, wrap: Callable[[Any, str], Any]) -> None:
        """Pass the world model and the judge through ``wrap(model, "world_model" | "judge")`` when each is built.

        ``model`` is the built model, or the function building it if it is not built yet (``wrap`` builds it by
        calling it); a lookahead uses this to meter both models' backends without loading them now.
        """
        world_model, judge = self._world_model, self._judge
        self._world_model = lambda: wrap(world_model, "world_model")
        self._judge = lambda: wrap(judge, "judge")

    @property
    def models_loaded(self) -> bool:
        """Whether the world model or the judge has been built yet."""
        return isinstance(self._world_model, WebWorldModel) or isinstance(self._judge, TrajectoryJudge)

    def step(
        self, episodes: Sequence[DreamEpisode], actions: Sequence[Any], seed: int | None = None
    ) -> list[tuple[dict[str, str], float, bool, bool, dict[str, Any]]]:
        """Apply one action to each episode, in place, with one world-model and one judge call.

        The step is atomic per episode: it is worked out on copies and written back at the end, so a
        raise anywhere leaves every episode as it was (calling ``step`` again is a clean retry).
        A backend failure (:class:`~dynaweb_env.llm.base.GenerationError`: server down, HTTP error,
        malformed answer, timeout) does not raise: the episodes it hit end truncated with reward 0
        and ``info["backend_error"]``. A world-model failure leaves the page as it was and does not
        count the step; a judge failure comes after the transition, which stays.

        Returns:
            One ``(observation, reward, terminated, truncated, info)`` per episode.
        """
        if len(episodes) != len(actions):
            raise ValueError(f"got {len(actions)} actions for {len(episodes)} episodes")
        if any(episode.done for episode in episodes):
            raise ValueError("step() called on a finished dream; reset it first")
        staged = [dataclasses.replace(episode, steps=list(episode.steps)) for episode in episodes]
        infos: list[dict[str, Any]] = []
        terminated = [False] * len(episodes)
        asks: list[int] = []
        left_page: dict[int, str] = {}  # episodes whose task ended when the action left its page
        for index, (episode, text) in enumerate(zip(staged, actions, strict=True)):
            action, shown, reasoning, error = read_dream_action(text, episode, self.action_set)
            episode.num_steps += 1
            episode.last_action, episode.last_action_error = shown, error
            infos.append(
                {**episode.reset_info(), "dream_step": episode.num_steps, "changes": "", "world_model_error": ""}
            )
            if action is None:
                continue
            episode.steps.append(judge_step(shown, reasoning, episode.axtree))
            if not action.is_stop:
                episode.last_action_axtree = episode.axtree
            if action.is_stop:
                episode.answer = action.arg("answer")
                terminated[index] = True
            elif task_error := leaves_task_page(action, episode):  # the task ends, as BrowserGym ends it
                terminated[index], left_page[index] = True, "left_task_page"
                infos[index]["task_error"] = task_error
                if action.name in ("new_tab", "go_back"):  # a blank tab is shown, as in the real browser
                    episode.url, episode.axtree = "about:blank", BLANK_PAGE_AXTREE
            else:
                episode.tabs += {"new_tab": 1, "close_tab": -1}.get(action.name, 0)
                asks.append(index)

        failed: dict[int, str] = {}
        try:
            requests = [world_model_request(staged[i]) for i in asks]
            # No request, no model: the world model is built (loaded) only when a step needs it.
            world_model = self.world_model if requests else None
            predictions, disagreeing = predict_with_disagreement(world_model, self.guards, requests, seed)
        except GenerationError as error:
            predictions, disagreeing, failed = [], [], dict.fromkeys(asks, f"world model: {error}")
        predicted = zip([] if failed else asks, predictions, disagreeing, strict=True)
        cut = {**self._apply_predictions(staged, predicted, terminated, infos), **left_page}
        for index in failed:  # the step did not happen: the page, the count and the history stay as they were
            staged[index] = dataclasses.replace(episodes[index], steps=list(episodes[index].steps))
            infos[index]["dream_step"] = staged[index].num_steps

        truncated = [
            index in failed or (not terminated[index] and (index in cut or episode.num_steps >= self.dream_length))
            for index, episode in enumerate(staged)
        ]
        gated = {i for i in asks if terminated[i] and self.guards.gate_termination and i not in failed}
        rewards, verdicts = self._finish(staged, terminated, truncated, infos, seed, failed, cut=cut)
        gated_verdicts = {i: verdicts[i] for i in gated if i in verdicts}
        gate_termination(staged, gated_verdicts, terminated, truncated, infos, self.dream_length, rewards)
        for episode, new in zip(episodes, staged, strict=True):
            for name in DreamEpisode.__dataclass_fields__:
                setattr(episode, name, getattr(new, name))
        return [
            (episode.observation(), rewards[i], terminated[i], truncated[i], infos[i])
            for i, episode in enumerate(episodes)
        ]

    def finish(self, episodes: Sequence[DreamEpisode], seed: int | None = None) -> list[tuple[float, dict]]:
        """End the running episodes now and judge them (one call): ``(reward, info)`` per episode as on a final
        step, ``end_reason="finish"``; an episode that had already ended gives its verdict again."""
        running = [index for index, episode in enumerate(episodes) if not episode.done]
        blank = {"changes": "", "world_model_error": ""}
        infos = [{**episodes[i].reset_info(), "dream_step": episodes[i].num_steps, **blank} for i in running]
        ended = [True] * len(running)
        self._finish([episodes[i] for i in running], ended, list(ended), infos, seed, {}, end_reason="finish")
        return [(episode.verdict[0], dict(episode.verdict[1])) for episode in episodes]  # type: ignore[index]

    def _apply_predictions(
        self,
        episodes: Sequence[DreamEpisode],
        predicted: Iterable[tuple[int, Any, bool]],
        terminated: list[bool],
        infos: list[dict[str, Any]],
    ) -> dict[int, str]:
        """Move each ``(index, prediction, samples disagreed)`` episode to its predicted page, in place.

        Returns:
            The episodes a guard cuts, with their ``end_reason``: ``"uncertain"`` (samples disagreed,
            ``uncertainty="cut"``) or ``"inconsistent"`` (``consistency="cut"``).
        """
        cut: dict[int, str] = {}
        for index, prediction, disagree in predicted:
            episode = episodes[index]
            refusal = NavigationPolicy.for_start_url(episode.start.url).refusal(prediction.url, episode.url)
            if prediction.url != episode.url and refusal:
                # The real browser would have refused to go there: the page stays, as it would have.
                episode.last_action_error = refusal
                infos[index]["world_model_error"] = f"predicted URL refused: {refusal}"
                continue
            # A browser's address bar shows the absolute URL, also when a world model predicted a relative one.
            url = absolute_url(prediction.url, episode.url)
            axtree = prediction.axtree
            if self.guards.keep_typed_text and url == episode.url:
                axtree, left_out = write_typed_text_in(episode.axtree, episode.last_action, axtree)
                if left_out:
                    infos[index]["world_model_omissions"] = [item.describe() for item in left_out]
            if self.guards.consistency != "off" and url == episode.url:
                found = page_inconsistencies(episode.axtree, episode.last_action, axtree)
                if found:
                    infos[index]["world_model_inconsistencies"] = [item.describe() for item in found]
                    if self.guards.consistency == "cut":
                        cut[index] = "inconsistent"  # its last page stays as dreamed: the record shows the error
                    else:
                        axtree = repair_page(axtree, found)
            episode.url, episode.axtree = url, truncate_axtree(axtree, MAX_TEXT_LENGTH)
            episode.previous_action = episode.last_action
            infos[index]["changes"] = prediction.changes
            infos[index]["world_model_error"] = prediction.error or ""
            terminated[index] = prediction.terminal and index not in cut
            if disagree:
                episode.uncertain_steps += 1
                infos[index]["world_model_disagreement"] = True
                if self.guards.uncertainty == "cut":
                    terminated[index] = False
                    cut.setdefault(index, "uncertain")
        return cut

    def _defer_judging(
        self, episodes: Sequence[DreamEpisode], to_judge: list[int], infos: list[dict[str, Any]]
    ) -> None:
        """Leave the finished episodes ``to_judge`` unjudged (reward 0), with the request their group's judge reads."""
        for index in to_judge:
            infos[index].update(judge_pending=True, judged=False, judge_reasoning="", judge_error="")
            infos[index]["judge_request"] = dataclasses.asdict(self.judge_request(episodes[index]))
            if episodes[index].uncertain_steps:
                infos[index]["world_model_uncertain_steps"] = episodes[index].uncertain_steps

    def _finish(
        self,
        episodes: Sequence[DreamEpisode],
        terminated: list[bool],
        truncated: list[bool],
        infos: list[dict[str, Any]],
        seed: int | None,
        failed: dict[int, str],
        end_reason: str | None = None,
        cut: dict[int, str] | None = None,
    ) -> tuple[list[float], dict[int, float]]:
        """End the finished episodes and judge them; a judge failure truncates them with reward 0.

        ``failed`` holds the episodes a backend already failed (no judge call); judge failures are added.
        ``cut`` maps the episodes a guard cut to their ``end_reason``: ended with reward 0, unjudged.

        Returns:
            The rewards, and the judge's verdict (its reward before any guard) of each judged episode.
        """
        cut = cut or {}
        rewards = [0.0] * len(episodes)
        to_judge: list[int] = []
        for index, episode in enumerate(episodes):
            infos[index]["judged"] = terminated[index] or truncated[index]
            if not (terminated[index] or truncated[index]):
                continue
            episode.done = True
            ended_by = "stop" if episode.answer is not None else "terminal_state"
            infos[index]["end_reason"] = end_reason or (ended_by if terminated[index] else "dream_length")
            if index in cut:
                infos[index].update(end_reason=cut[index], judge_reasoning="", judge_error="")
            if index in failed or index in cut:
                continue
            if episode.steps:
                to_judge.append(index)
            else:
                # Nothing was done in the dream, so nothing can have been accomplished: no judge call.
                infos[index].update(judge_reasoning="the dream took no valid action", judge_error="")
        if self.guards.group_judging != "off":  # judged later with the dream's group (judge_groups)
            self._defer_judging(episodes, to_judge, infos)
            to_judge = []
        requests = [self.judge_request(episodes[i]) for i in to_judge]
        try:
            verdicts = self.judge.judge(requests, seed=seed) if requests else []
        except GenerationError as error:
            failed.update(dict.fromkeys(to_judge, f"judge: {error}"))
            to_judge, requests, verdicts = [], [], []
        for index, request, verdict in zip(to_judge, requests, verdicts, strict=True):
            rewards[index] = self.guards.reward_of(verdict, episodes[index].uncertain_steps, infos[index], request)
        for index, message in failed.items():
            # No verdict: the episode is cut (truncated), not finished, and its reward is no judgement.
            terminated[index], truncated[index] = False, True
            infos[index].update(end_reason="backend_error", backend_error=message, judge_reasoning="", judged=False)
            infos[index]["judge_error"] = message if message.startswith("judge:") else ""
        for index, episode in enumerate(episodes):
            if episode.done and episode.verdict is None:
                episode.verdict = (rewards[index], dict(infos[index]))
        return rewards, {index: verdict.reward for index, verdict in zip(to_judge, verdicts, strict=True)}

    def judge_groups(
        self, groups: Sequence[Sequence[dict[str, Any]]], seed: int | None = None
    ) -> list[list[tuple[float, dict[str, Any]]]]:
        """Group-relative rewards (``reward_guards.group_judging``) of finished dreams, given by their final
        ``info``, grouped as the host groups them: ``(reward, info update)`` per dream, one judge call.
        See :func:`~dynaweb_env.envs.dream_guards.score_groups`."""
        if self.guards.group_judging == "off":
            raise ValueError("judge_groups needs reward_guards.group_judging 'votes' or 'listwise'")
        return score_groups(self.judge, self.guards, groups, seed)

    @staticmethod
    def judge_request(episode: DreamEpisode) -> JudgeRequest:
        """What the judge reads of a dream: the recorded actions before its start, the dreamed ones, the last page."""
        start = episode.start
        # Start states written before history_targets existed have none: the actions are shown without them.
        targets = (
            start.history_targets if len(start.history_targets) == len(start.history) else [""] * len(start.history)
        )
        recorded = tuple(
            JudgeStep(action, target=target) for action, target in zip(start.history, targets, strict=True)
        )
        return JudgeRequest(
            goal=episode.start.goal,
            steps=recorded + tuple(episode.steps),
            final_url=episode.url,
            final_axtree=episode.axtree,
            answer=episode.answer,
            last_action_axtree=episode.last_action_axtree,
        )


class DreamWebEnv(gym.Env[dict[str, str], str]):
    """A web task in a dream: a world model plays the web server, a judge gives the reward.

    ## Description

    The DynaWeb paper's synthetic environment. An episode starts on a real page (initial or
    intermediate) taken from a recorded trajectory; each action the policy takes is sent, with the
    current page, to an LLM web world model (:class:`~dynaweb_env.world_model.model.WebWorldModel`)
    that predicts the changes and the next accessibility tree. When the dream ends, an LLM judge
    (:class:`~dynaweb_env.world_model.judge.TrajectoryJudge`) reads the whole trajectory and returns
    reward 1 (task accomplished) or 0.

    ## Action Space

    ``web_action_space()``: one string in the paper's grammar (:mod:`dynaweb_env.actions`), e.g.
    ``click [13]``, ``select [7] [Red]`` or ``stop [42]``, or a whole policy response (``REASON: ... ACTION: ...``)
    from which the action is extracted. With ``action_set="browsergym"``, BrowserGym's calls instead
    (``click('13')``, ``select_option('7', 'Red')``, ``send_msg_to_user('42')``:
    :mod:`~dynaweb_env.browsergym_actions`), read into the same actions, which the world model and judge see.
    A malformed action, or one on an element id that is not in the current tree, costs a step, leaves the page
    unchanged, sets ``last_action_error`` (worded as RealWeb-v0 words it) and makes no model call.

    ## Observation Space

    ``web_observation_space()``: a dict of strings ``goal``, ``url``, ``axtree`` (flattened
    accessibility tree), ``last_action``, ``last_action_error`` — the same as RealWeb-v0's.

    ## Starting State

    A start state drawn uniformly (with ``self.np_random``) from the start-state set (by default the shipped
    one: the experts' pages of the large dataset's train split, all 24 MiniWoB++ tasks). ``reset``
    options pin it: ``{"start_state": StartState | dict}``, or ``{"task": id, "task_seed": n}``
    (optionally ``"step_index": k``), so a group of rollouts can share one start state. At an
    intermediate state, ``last_action`` shows the recorded action that led to it.

    ## Rewards

    0 on every non-final step. On the final step, the judge's verdict in {0, 1}; a dream that
    took no valid action scores 0 without a judge call. A judge that gives no verdict (no ``VERDICT`` line, its
    token limit hit, its backend failed) gives reward 0 with ``info["judged"] = False`` and ``info["judge_error"]``
    saying why: that 0 is no verdict, and a trainer should not read it as one. ``reward_guards``
    (:mod:`~dynaweb_env.envs.dream_guards`) make it harder to game; one is on by default, the objective check: a
    SUCCESS whose trajectory left an explicit requirement of the objective undone (a quoted text typed nowhere, a
    named checkbox unchecked) earns 0 with ``info["objective_unmet"]``.

    ## Episode End

    - Termination: the policy issues ``stop [answer]``, or the world model marks the next page as
      terminal (``[Episode ended]``).
    - Termination with reward 0 and no judge call: the policy left the page of a task that lives on one
      page (MiniWoB++: ``new_tab``, ``go_back``, or ``goto`` another address), as RealWeb-v0's task ends it
      (``end_reason="left_task_page"``, ``info["task_error"]`` in BrowserGym's words).
    - After the end, ``step`` raises ``gym.error.ResetNeeded`` until ``reset``, as RealWeb-v0 does.
    - Reward guards may gate the world model's terminal mark, or cut a dream whose world-model samples
      disagree (truncation, ``end_reason="uncertain"``) or whose predicted page breaks page consistency
      (``end_reason="inconsistent"``).
    - Truncation: ``dream_length`` steps (malformed ones included). Truncated dreams are judged too,
      so a dream that finishes a task without ``stop`` can still score.
    - Truncation: a world-model or judge backend failed (server down, HTTP error, malformed answer,
      timeout). ``step`` does not raise: the reward is 0, ``info["backend_error"]`` says what
      failed and ``info["end_reason"]`` is ``"backend_error"``. A world-model failure leaves the
      page as it was and the step uncounted. Timeouts and retries of a server backend are set in its
      spec, e.g. ``"openai:<model>@http://host:8000/v1?timeout=300&retries=1"``.
    - On demand: :meth:`finish` (``env.unwrapped.finish()`` after ``gym.make``) ends the dream now
      and judges it, for hosts that end episodes themselves (a turn cap, a model that stops calling tools).

    ``info`` carries ``task_id``, ``source="dream"``, ``trajectory_id``, ``start_step_index`` (of
    the start state in its recording; ``reset``'s info adds ``start_history``, the recorded actions before it),
    ``dream_step``, ``changes`` (the predicted Δ),
    ``world_model_error`` (``""`` if the output was well-formed), ``judged`` (the reward is the
    dream's verdict: ``True`` on a final step whose judge gave a readable verdict, or that needed none; ``False``
    before the end, after a backend failure, and when the judge's output held no verdict) and, on the final step,
    ``end_reason``,
    ``judge_reasoning`` and ``judge_error``; with the reward guards also ``judge_abstained`` and
    ``judge_votes`` (votes), ``world_model_disagreement`` (on a step whose samples disagreed),
    ``world_model_uncertain_steps`` and ``termination_gated``; with group-relative judging a finished dream
    has reward 0, ``judge_pending`` and ``judge_request`` until the host scores its group.

    ## Arguments

    The keyword arguments of :class:`~dynaweb_env.envs.dream_setup.DreamSettings`, documented there: the world
    model and judge, start states and tasks, ``dream_length``, sampling and generation budgets, ``reward_guards``,
    ``render_mode``.

    Models are loaded on the first step that needs them, so ``gym.make`` is cheap. The sampling seed
    of every model call is drawn from ``self.np_random``: the same seed and actions with
    ``world_model_temperature=0`` give the same rollout.

    ## Version History

    - v0: Initial version. Later, without changing defaults: ``reward_guards``; prompt styles. Then (issue 48)
      the defaults changed: the trained judge (was the world model's backend), start states of all 24 tasks (were
      9), the objective check, and ``judged`` is ``False`` for a judge output without a verdict.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 1}

    @takes_dream_settings
    def __init__(self, **settings: Any):
        #: The arguments it was made with, checked.
        self.settings = DreamSettings.of(type(self).__name__, settings)
        self.observation_space = web_observation_space()
        self.action_space = web_action_space()
        self.render_mode = self.settings.render_mode
        self.dream_length = self.settings.dream_length
        #: The world model and judge, loaded on the first step that needs one (``gym.make`` stays cheap).
        self.dynamics, self.start_states = self.settings.build()
        self._episode: DreamEpisode | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._episode = DreamEpisode.begin(choose_start_state(self.start_states, self.np_random, options))
        return self._episode.observation(), self._episode.start_info()

    def step(self, action: str):
        if self._episode is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._episode.done:
            raise gym.error.ResetNeeded(EPISODE_ENDED)
        # Drawn on every step, model call or not, so the generator advances the same way each time.
        seed = int(self.np_random.integers(2**31 - 1))
        (result,) = self.dynamics.step([self._episode], [action], seed=seed)
        return result

    def finish(self) -> tuple[float, dict[str, Any]]:
        """End the dream now and judge it: ``(reward, info)`` as on a final step; an ended dream's verdict again."""
        if self._episode is None:
            raise gym.error.ResetNeeded("call reset() before finish()")
        seed = None if self._episode.done else int(self.np_random.integers(2**31 - 1))
        ((reward, info),) = self.dynamics.finish([self._episode], seed=seed)
        return reward, info

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' to gym.make")
            return None
        if self._episode is None:
            return ""
        return render_dream(self._episode)


__all__ = ["DreamDynamics", "DreamEpisode", "DreamWebEnv", "END_REASONS", "generation_budgets"]
