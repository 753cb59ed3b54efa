"""Cooperation with other CUPTI clients: the collector steps aside before torch.profiler starts
(CUPTI serves one activity client per process), via a hook installed now or right after
``torch.autograd.profiler`` is imported."""

from __future__ import annotations

import sys


def hook_torch_profiler(session, warn_once) -> None:
    """Make ``session`` step aside before torch.profiler prepares Kineto (it needs CUPTI for itself)."""

    def install() -> bool:
        mod = sys.modules.get("torch.autograd.profiler")
        prof = getattr(mod, "profile", None) if mod else None
        if prof is None or getattr(prof._prepare_trace, "_cudawatch", False):
            return prof is not None
        original = prof._prepare_trace

        def _prepare_trace(self_, *a, **kw):
            if session.active and not session.stopped:
                warn_once("collector off: stepping aside for torch.profiler (it needs CUPTI); shards so far are kept")
                session.stop()
            return original(self_, *a, **kw)

        _prepare_trace._cudawatch = True
        prof._prepare_trace = _prepare_trace
        return True

    if not install():
        sys.meta_path.insert(0, _AfterImport("torch.autograd.profiler", install))


class _AfterImport:
    """A meta-path finder that runs ``hook()`` right after module ``name`` has been executed."""

    def __init__(self, name: str, hook) -> None:
        self.name, self.hook = name, hook

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, hook, finder = spec.loader, self.hook, self

        class _Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                try:
                    sys.meta_path.remove(finder)
                except ValueError:  # already removed by an earlier import: nothing to undo
                    pass
                sys.modules[fullname] = module
                hook()

        spec.loader = _Loader()
        return spec
