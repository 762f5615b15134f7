"""Loading a config: schema defaults, then a YAML file (or text), then dotted ``key=value`` overrides.

A file may name another as its ``base`` (a path relative to it): the base is loaded first and the file's own
keys go over it, so a variant (``configs/hopper_redq.yaml``) says only how it differs from its base.

OmegaConf structured configs do the parsing, so an unknown key or a value of the wrong type is rejected
before anything runs; the message is reduced to what was wrong and what is expected. The result is
validated (:func:`mbpo.config.validation.validate`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mbpo.config.schema import Config, ConfigError, resolve_type
from mbpo.config.validation import learner_keys, validate

__all__ = ["load_config", "config_from_yaml", "to_yaml"]

BASE_KEY = "base"
"""The key of a config file that names the file it builds on (relative to it)."""


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Schema defaults, then the YAML file (over its bases), then ``key=value`` overrides; validated."""
    layers: list[tuple[str, str, bool]] = []
    if path is not None:
        path = Path(path)
        while True:
            if path.is_dir():
                raise ConfigError(f"config {str(path)!r} is a directory; expected a YAML file such as "
                                  "configs/pendulum_sac.yaml")
            if not path.is_file():
                via = f" (the base of {layers[0][1]})" if layers else ""
                raise ConfigError(f"config file {str(path)!r} does not exist{via}")
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:  # another encoding, or not a text file (a checkpoint, an image)
                raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}: "
                                  f"{exc.object[exc.start:exc.start + 1]!r}); expected a YAML text file such as "
                                  "configs/pendulum_sac.yaml (saved as UTF-8)") from None
            data = _check_yaml(text, str(path))
            if data is None:  # a file saved empty, or the wrong file: not a run of the schema's defaults by chance
                raise ConfigError(f"config file {str(path)!r} holds no keys (it is empty, or only comments); expected "
                                  "a mapping of config keys (e.g. 'seed: 0'); write '{}' for the schema's defaults")
            layers.insert(0, (text, str(path), False))
            base = data.get(BASE_KEY) if data else None
            if base is None:
                break
            if not isinstance(base, str):
                raise ConfigError(f"{path}: {BASE_KEY}: {base!r} is not a path; expected the config file this one "
                                  "builds on, relative to it (e.g. base: hopper_mbpo.yaml)")
            path = (path.parent / base).resolve()
            if any(Path(source).resolve() == path for _, source, _ in layers):
                raise ConfigError(f"{layers[-1][1]}: its bases lead back to {path} (a cycle); a base must not build "
                                  "on the file that names it")
    return _merged(layers, overrides)


def config_from_yaml(text: str | None, overrides: list[str] | None = None, source: str = "the config") -> Config:
    """Like :func:`load_config` for YAML text (e.g. the config saved in a checkpoint: resolved, no base);
    ``source`` names it in errors. The text is read as written: a ``${...}`` in it is the resolved value of an
    escaped one (a run dir named ``lit_${x}``), not a reference to resolve again.
    """
    if text is not None:
        data = _check_yaml(text, source)
        if data and BASE_KEY in data:
            raise ConfigError(f"{source} names a {BASE_KEY}: config text is read alone; load it from its file "
                              "(load_config) so the base is found beside it")
    return _merged([] if text is None else [(text, source, True)], overrides)


def _merged(layers: list[tuple[str, str, bool]], overrides: list[str] | None) -> Config:
    """The schema, then each YAML layer (less its ``base`` key; read literally where its flag says so) in order,
    then the overrides; validated.

    A layer (a file, or the overrides together) that switches agent.name first sets the keys of the learner it
    leaves back to their defaults: ``configs/pendulum_sac.yaml agent.name=dqn`` drops the file's agent.sac
    tuning, while an agent.sac key set with or after the switch stays, and validation refuses it.
    """
    try:
        # merging into the structured Config keeps it a DictConfig
        cfg: DictConfig = OmegaConf.structured(Config)
        for text, source, literal in layers:
            data = _as_written(_check_yaml(text, source), yaml.load(text, Loader=yaml.BaseLoader), Config)  # noqa: S506
            layer = cast(DictConfig, OmegaConf.create(_escaped(data) if literal else data))  # a mapping: checked
            layer.pop(BASE_KEY, None)
            _check_shapes(OmegaConf.to_container(layer), Config, "", f"{source}: ")
            try:
                _switch_learner(cfg, OmegaConf.select(layer, "agent.name", default=None))
                cfg = cast(DictConfig, OmegaConf.merge(cfg, layer))
            except OmegaConfBaseException as exc:  # named with its file: a base chain hides which one
                raise ConfigError(f"{source}: {_explain(exc)}") from None
        for item in overrides or []:
            if "=" not in item:
                hint = f"; a config file is passed as --config {item}" if item.endswith((".yaml", ".yml")) else ""
                raise ConfigError(f"override {item!r} is not of the form key=value (e.g. env.num_envs=8){hint}")
            if not all(part.strip() for part in item.split("=", 1)[0].split(".")):
                raise ConfigError(f"override {item!r}: its key has an empty part; expected dotted names "
                                  "(e.g. agent.batch_size=256)")
            if item.split("=", 1)[1].strip() not in ("null", "~"):  # null fits any key that may be null
                _check_shapes(_override_data(item), Config, "", f"{item!r}: ")
        names = [item for item in overrides or [] if item.split("=", 1)[0].strip() == "agent.name"]
        if names:
            _switch_learner(cfg, _override_data(names[-1])["agent"]["name"])
        for item in overrides or []:
            key, value = item.split("=", 1)
            section = _fields_at(key.strip())
            if section and value.strip() in _CLEARS:  # a merge would keep every key: a silent no-op
                raise ConfigError(f"{item!r}: {key.strip()} is a section of keys, which cannot be emptied; set the "
                                  f"keys you mean ({key.strip()}.<key>=...): {', '.join(sorted(section))}")
            if section:  # OmegaConf's merge error would name no key
                raise ConfigError(f"{item!r}: {key.strip()} is a section of keys, not a value; set its keys "
                                  f"({key.strip()}.<key>=...): {', '.join(sorted(section))}")
            if value.strip() in _CLEARS and _is_mapping(key):  # a merge would keep the keys it holds
                OmegaConf.update(cfg, key, {}, merge=False)
                continue
            cfg = cast(DictConfig, OmegaConf.merge(cfg, OmegaConf.create(_override_data(item))))
        config = cast(Config, OmegaConf.to_object(cfg))  # a structured DictConfig converts back to its dataclass
    except OmegaConfBaseException as exc:  # an unknown key, a wrong type, a ${reference} to nothing
        raise ConfigError(_explain(exc)) from None
    validate(config)
    return config


def _check_shapes(data: Any, cls: Any, prefix: str, where: str) -> None:
    """Each value of ``data`` (a layer or an override, as plain data) of the shape its key holds: a section or
    a mapping, a list, or one value. OmegaConf's merge would raise a TypeError naming no key, or a message
    about a key the user never wrote; ``where`` names the file or the override. Also refuses the string
    ``None`` in a key that may be null (YAML's null is ``null``: ``None`` would be a dir named None).
    """
    if not isinstance(data, dict):
        return
    fields = {f.name: f for f in dataclasses.fields(cls)}
    types = {name: f.type for name, f in fields.items()}
    for key, value in data.items():
        if key not in types:
            continue  # an unknown key: the merge names it with the keys there are
        dotted, annotation = f"{prefix}{key}", str(types[key])
        nested = resolve_type(types[key])
        got = "mapping" if isinstance(value, dict) else "list" if isinstance(value, list) else "value"
        if nested is not None:
            if value is None or got != "mapping":
                keys = ", ".join(sorted(f.name for f in dataclasses.fields(nested)))
                if where.startswith("'"):  # an override: the message the section=value check gives (_merged)
                    raise ConfigError(f"{where}{dotted} is a section of keys, not a {got}; set its keys "
                                      f"({dotted}.<key>=...): {keys}")
                what = "empty" if value is None else f"a section of keys, not a {got} ({value!r})"
                raise ConfigError(f"{where}{dotted} is {what}; set its keys under it ({dotted}.<key>): {keys}")
            _check_shapes(value, nested, f"{dotted}.", where)
            continue
        want = "mapping" if annotation.startswith("dict[") else "list" if annotation.startswith("list[") else "value"
        reference = isinstance(value, str) and "${" in value  # an OmegaConf interpolation: resolved later
        if value is not None and not reference and got != want and ("mapping" in (got, want) or want == "list"):
            field = fields[key]
            default = field.default_factory() if callable(field.default_factory) else field.default
            expected = {"mapping": f"a mapping (e.g. {dotted}={{name: 1}})", "value": "one value",
                        "list": f"a list (e.g. {dotted}={default or [256, 256]})"}[want]
            raise ConfigError(f"{where}{dotted} holds a {got} ({value!r}); expected {expected}")
        if annotation in ("bool", "bool | None") and not _reads_as_bool(value):
            raise ConfigError(f"{where}{dotted} is {value!r}; expected true or false")
        if value == "None" and annotation.endswith("| None"):
            raise ConfigError(f"{where}{dotted} is the text 'None'; write null for no value (YAML's None)")


BOOL_WORDS = ("true", "false", "yes", "no", "on", "off", "y", "n", "1", "0")
"""What OmegaConf reads as a bool (any case), besides YAML's own true and false."""


def _reads_as_bool(value: Any) -> bool:
    """A bool, 0 or 1, or one of BOOL_WORDS: OmegaConf would also read 2 (or 0.5) as true."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return value in (0, 1)
    return isinstance(value, str) and value.strip().lower() in BOOL_WORDS


def _switch_learner(cfg: DictConfig, name: Any) -> None:
    """Where ``name`` (a layer's agent.name; None: it sets none) leaves the current learner, set every key of the
    others back to its default, so that one learner's tuning in a file does not stop another's run.
    """
    if name is None or name == cfg.agent.name:
        return
    for key, (learner, default) in learner_keys().items():
        if learner != name:
            OmegaConf.update(cfg, key, default, merge=False)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML forbids it; PyYAML keeps the last
    silently, and OmegaConf raises without naming the file).
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *base``: its keys may be overridden by the mapping's own (flattened below)
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):
                continue  # a key PyYAML itself refuses below
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first at line {seen[key] + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_NO_YAML11 = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
             "tag:yaml.org,2002:timestamp")
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _NO_YAML11]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
"""YAML 1.1's implicit scalars misread a config: ``010`` is octal 8 (two seeds of a sweep collide), ``1:30`` is
90 (base 60), ``yes``/``on`` are booleans and ``2025-01-15`` a date, whatever the key. YAML 1.2's core schema
instead, as below: an integer is decimal, leading zeros included (``0x``/``0o``/``0b`` prefixes as written), with
``_`` between digits allowed; a float has a point or an exponent; true/false are the booleans (a boolean key
still takes yes/no/on/off: OmegaConf converts the text)."""
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:[0-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+)$"),
    list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text.lstrip("+"))
    base = {"0x": 16, "0o": 8, "0b": 2}.get(digits[:2].lower(), 10)
    return sign * int(digits[2:] if base != 10 else digits, base)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


TEXT = ("str", "str | None")
"""The schema's text types (as :func:`_annotation` names them): such a key takes its value as written."""
NULLS = ("", "~", "null", "Null", "NULL")
"""YAML's spellings of null (an empty value too): a text key given one of them is null, not that text."""


def _as_written(data: Any, raw: Any, cls: Any) -> Any:
    """``data`` (a layer as YAML reads it) with each text key's value as written in ``raw`` (the same text read
    with every scalar a string): a run dir ``2025_01_15`` or ``0o17`` in a file is that name, not a number.
    """
    if not isinstance(data, dict) or not isinstance(raw, dict):
        return data
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    out = dict(data)
    for key, value in data.items():
        if key not in fields or key not in raw:
            continue
        nested = resolve_type(fields[key])
        if nested is not None:
            out[key] = _as_written(value, raw[key], nested)
        elif str(fields[key]) in TEXT and value is not None and not isinstance(value, str) \
                and isinstance(raw[key], str):
            out[key] = raw[key]
    return out


def _override_data(item: str) -> dict[str, Any]:
    """``key=value`` as nested plain data. A key the schema types as text takes the value as written (a run dir
    ``@scratch``, ``2025_01_15`` or ``yes`` is that name, not a YAML token); any other value is read as YAML
    (1.2 scalars, :data:`_UniqueKeyLoader`), a mistake in it named with the override.
    """
    key, text = (part.strip() for part in item.split("=", 1))
    if _annotation(key) in TEXT and text not in NULLS and not (
            len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""):
        value: Any = text
    else:
        try:
            value = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"override {item!r}: its value is not valid YAML ({problem}{where}); expected a "
                              "number, true/false, null, text, a list [a, b] or a mapping {k: v} (quote text that "
                              "starts with @, %, ! or holds brackets)") from None
    for part in reversed([p for p in re.split(r"[.\[\]]", key) if p]):
        value = {part: value}
    return cast(dict[str, Any], value)


def _escaped(data: Any) -> Any:
    """``data`` with every ``${`` in its text escaped, so that OmegaConf keeps it as written."""
    if isinstance(data, dict):
        return {k: _escaped(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_escaped(v) for v in data]
    return data.replace("${", "\\${") if isinstance(data, str) else data


def _annotation(dotted: str) -> str | None:
    """The schema's type of ``dotted`` as text (``'int'``, ``'str | None'``); None for no such key."""
    parent, _, name = dotted.rpartition(".")
    cls: Any = Config
    for part in (parent.split(".") if parent else []):
        cls = resolve_type({f.name: f.type for f in dataclasses.fields(cls)}.get(part))
        if cls is None:
            return None
    annotation = {f.name: f.type for f in dataclasses.fields(cls)}.get(name)
    return None if annotation is None else str(annotation)


def _check_yaml(text: str, source: str) -> dict[str, Any] | None:
    """YAML syntax and shape, with the file and line in the message (OmegaConf would name neither); the
    mapping (None for an empty file).
    """
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader (YAML 1.2 scalars, no repeated keys)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source} is not valid YAML: {problem}{where}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{source} holds a YAML {type(data).__name__} at the top level; expected a mapping of "
                          "config keys (e.g. 'seed: 0' and 'env:' with 'id: Pendulum-v1' under it)")
    return data


class _QuotingDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting a text that this module's loader (YAML 1.2 scalars) would read as anything
    else, as well as one YAML 1.1 readers would (``0o17``, ``1_000``, ``yes``): a stored config reads back as it
    was, wherever the text is (an ``env.kwargs`` value too).
    """


_QuotingDumper.yaml_implicit_resolvers = {
    first: list(yaml.SafeDumper.yaml_implicit_resolvers.get(first, []))
    + list(_UniqueKeyLoader.yaml_implicit_resolvers.get(first, []))
    for first in {*yaml.SafeDumper.yaml_implicit_resolvers, *_UniqueKeyLoader.yaml_implicit_resolvers}
}


def to_yaml(config: Config) -> str:
    """The fully resolved config, as written to ``run_dir/config.yaml`` (read back by :func:`config_from_yaml`)."""
    data = OmegaConf.to_container(OmegaConf.structured(config), resolve=False)
    return yaml.dump(data, Dumper=_QuotingDumper, default_flow_style=False, allow_unicode=True, sort_keys=False)


def _explain(exc: OmegaConfBaseException) -> str:
    """OmegaConf's message, reduced to what was wrong and what is expected."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
    msg = str(exc).split("\n")[0]
    if type(exc).__name__ == "ConfigKeyError" or "not in struct" in msg:
        parent = key.rsplit(".", 1)[0] if key and "." in key else None
        known = sorted(_fields_at(parent))
        return f"unknown config key {key!r}; known keys{' under ' + parent if parent else ''}: {', '.join(known)}"
    if type(exc).__name__ == "ValidationError":
        hint = ""
        if "could not be converted to Integer" in msg and "type 'float'" in msg:
            hint = " (write a whole number as digits: 1000000, not 1e6)"
        return f"config key {key!r}: {msg}{hint}"
    return f"config error at {key!r}: {msg}" if key else f"config error: {msg}"


_CLEARS = ("{}", "null", "~")
"""Override values that empty a mapping key (``env.kwargs={}`` or ``env.kwargs=null``) instead of merging."""


def _is_mapping(dotted: str) -> bool:
    """Whether the schema types ``dotted`` as a dict (env.kwargs), whose overrides otherwise merge into it."""
    return (_annotation(dotted) or "").startswith(("dict[", "Dict[", "typing.Dict["))


def _fields_at(dotted: str | None) -> list[str]:
    cls: Any = Config
    for part in (dotted.split(".") if dotted else []):
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        cls = resolve_type(types.get(part))
        if cls is None:
            return []
    return [f.name for f in dataclasses.fields(cls)]


