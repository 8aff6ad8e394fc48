"""A user's own code named in a config: ``algorithm.class_path: gossip.Gossip``, ``models.pool: [mymodels:tiny]``,
``data.dataset: mydata:load``. The working directory is importable (as with ``python -m``), and a name that cannot
be loaded gives one line naming the config key and the real cause: the module is not found, importing it raised
(the exception and the line of the module where it did), or the module has no such attribute."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError


def is_user_spec(name: str) -> bool:
    """Whether a ``models.pool`` entry or ``data.dataset`` names user code, ``module:attribute`` (``timm:<name>``
    is a timm model)."""
    module, sep, attribute = name.partition(":")
    return bool(sep and module and attribute) and module != "timm"


def working_directory_importable() -> None:
    """Put the working directory first on ``sys.path`` (``python -m`` does; a console script does not)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def import_problem(module: str, name: str) -> str | None:
    """Why ``module.name`` cannot be loaded, in one phrase; None when it can."""
    working_directory_importable()
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is not None and (module == err.name or module.startswith(err.name + ".")):
            return (f"no module named {err.name!r} (not in the working directory {os.getcwd()} nor installed; "
                    f"run lit-fl from the folder that holds it, or pip install it)")
        return f"importing {module!r} failed: {_raised_in(err, module)}"
    except Exception as err:  # noqa: BLE001 - whatever the user's module raises is the cause to name
        return f"importing {module!r} failed: {_raised_in(err, module)}"
    if not hasattr(loaded, name):
        public = sorted(n for n in vars(loaded) if not n.startswith("_") and isinstance(vars(loaded)[n], type))
        return f"module {module!r} has no {name!r}" + (f"; it defines: {', '.join(public)}" if public else "")
    return None


def failed_user_import(err: BaseException) -> str | None:
    """``err`` raised while a user's module named by a config was imported (by jsonargparse resolving
    ``algorithm.class_path``, or by importlib): the one-phrase cause, naming the module; None for anything else (a
    bug of lit-fl or of a library keeps its traceback)."""
    frames = traceback.extract_tb(err.__traceback__)
    first = next((i for i, f in enumerate(frames) if _is_user_file(f.filename)), None)
    if first is not None:
        importer, source = frames[first - 1].filename if first else "", Path(frames[first].filename)
    elif isinstance(err, SyntaxError) and err.filename and _is_user_file(err.filename) and frames:
        importer, source = frames[-1].filename, Path(err.filename)
    else:
        return None
    if not ("jsonargparse" in Path(importer).parts or importer.startswith("<frozen importlib")):
        return None
    return f"importing {source.stem!r} failed: {_raised_in(err, source.stem)}"


def _is_user_file(filename: str) -> bool:
    """A file of the user's own code: not lit-fl's, not an installed package's, not the standard library's."""
    path = Path(filename)
    if filename.startswith("<") or "lit_fl" in path.parts or "site-packages" in path.parts:
        return False
    return not path.is_relative_to(Path(sys.base_prefix)) and not path.is_relative_to(Path(sys.prefix))


def load_object(spec: str, key: str) -> Any:
    """The object ``spec`` names, as ``module:attribute`` (or ``module.attribute``); a ConfigError naming ``key``
    otherwise."""
    module, sep, name = spec.partition(":")
    if not sep:
        module, _, name = spec.rpartition(".")
    if not module or not name:
        raise ConfigError(f"{key}: {spec!r} is not module:attribute")
    problem = import_problem(module, name)
    if problem is not None:
        raise ConfigError(f"{key}: cannot load {spec!r}: {problem}")
    return getattr(importlib.import_module(module), name)


def _raised_in(err: BaseException, module: str) -> str:
    """``Type: message`` plus the file and line of the deepest frame in the user's own code."""
    frames = traceback.extract_tb(err.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename and "lit_fl" not in Path(f.filename).parts]
    where = f" ({Path(own[-1].filename).name}:{own[-1].lineno})" if own else ""
    if isinstance(err, SyntaxError) and err.filename:
        where = f" ({Path(err.filename).name}:{err.lineno})"
        return f"SyntaxError: {err.msg}{where}"
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {message}{where}" if message else f"{type(err).__name__}{where}"
