"""Thin adapters that plug DynaWeb's envs into other agent libraries.

Each module needs its library, installed through an extra; nothing imports them by default:

- :mod:`~dynaweb_env.integrations.openenv`: an OpenEnv ``Environment``, its pydantic types, a
  typed client and the ``dynaweb-serve`` server (``pip install 'dynaweb[openenv]'``).
- :mod:`~dynaweb_env.integrations.trl`: a class for ``GRPOTrainer(environment_factory=...)`` whose
  tools act on the page (``pip install 'dynaweb[train]'``).
- :mod:`~dynaweb_env.integrations.skyrl`: a SkyRL-gym ``BaseTextEnv``, registered as
  ``"dynaweb"`` (``pip install 'dynaweb[skyrl]'``).
- :mod:`~dynaweb_env.integrations.gem`: a GEM env, registered as ``"dynaweb:DreamWeb-v0"`` and
  ``"dynaweb:RealWeb-v0"`` (``pip install 'dynaweb[gem]'``).

When the host library ends an episode itself (a turn cap, a model that stops calling tools), the
adapters end the dream with :meth:`~dynaweb_env.envs.dream.DreamWebEnv.finish`, so its reward is the
judge's verdict and not a silent 0.
"""

from __future__ import annotations

from ._common import WebEpisode, episode_summary, render_step

__all__ = ["WebEpisode", "episode_summary", "render_step"]
