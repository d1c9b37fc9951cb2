"""Loads Jinja's filter and test plugins once in the controller's main process, before each task.

Ansible forks a worker per host and task, and a worker that meets a filter or test while the main
process has none loaded loads every legacy plugin file itself (ansible-core 2.19,
plugins/loader.py, Jinja2Loader._ensure_non_collection_wrappers), compiling their source, and the
result dies with the worker. The main process only templates now and then, and each role that
brings a plugin directory empties its cache again (PluginLoader.add_directory): on a 4-node no-op
install, 70 workers did this, about 0.17 s each (wall). Loaded here, the workers forked after it
inherit the loaded plugins. When they are loaded already, this is two dictionary lookups.

The runner points ANSIBLE_CALLBACK_PLUGINS at this directory (content.callback_plugins_dir()) and
enables it (ANSIBLE_CALLBACKS_ENABLED, content.JINJA_WARM_CALLBACK) for every run the `appliance`
command starts.
"""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

DOCUMENTATION = """
    name: appliance_jinja_warm
    type: aggregate
    short_description: load Jinja filter and test plugins before the workers fork
    description:
      - Before each task, looks up one filter and one test, which loads every legacy filter and test
        plugin in the controller's main process when they are not loaded yet.
    requirements:
      - enabled in callbacks_enabled (the appliance runner enables it)
"""

# Any name makes the loader fill its cache; these two are core plugins, so the lookup ends there.
_FILTER, _TEST = "b64decode", "changed"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "appliance_jinja_warm"
    CALLBACK_NEEDS_ENABLED = True

    def _warm(self) -> None:
        filter_loader.get(_FILTER)
        test_loader.get(_TEST)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._warm()

    def v2_playbook_on_handler_task_start(self, task):
        self._warm()
