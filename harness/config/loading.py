"""Loading an experiment: YAML in, `--set` overrides applied, every problem reported at once
(exit code 2), each with its key path and a did-you-mean hint."""

from __future__ import annotations

import copy
import json
import re
import typing
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

from harness.config.catalog import check_spec
from harness.config.recipes import ACCEPTED
from harness.config.grid import GRID, GridOrigin, expand_grids
from harness.config.schema import PATTERN_RULES, ExperimentConfig
from harness.config.unions import describe_union, split_union_errors
from harness.errors import ConfigError, closest, did_you_mean

# `key.path=value` strings, one such string, or a mapping of key paths to values (the API's forms).
Overrides = str | list[str] | Mapping[str, Any] | None

# ---------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | Path | Mapping[str, Any] | ExperimentConfig, overrides: Overrides = None) -> ExperimentConfig:
    """Read a YAML experiment (or take its mapping as a dict, as a notebook builds it, or a config
    loaded before: its settings as config.yaml would hold them, grids expanded), apply
    `key.path=value` overrides (one string or a list of them) and validate it all at once."""
    if isinstance(path, ExperimentConfig):
        raw, path = path.to_dict(), f"the config {path.name!r}"  # a copy: the object given is left as it was
    elif isinstance(path, Mapping):
        raw, path = copy.deepcopy(dict(path)), "the config given as a dict"  # the caller's dict is left as it was
    elif isinstance(path, (str, Path)):
        raw = _read_yaml(Path(path))
    else:
        raise ConfigError(f"a config is a YAML file's path, a dict of its keys or a loaded config, not {type(path).__name__}")
    problems: list[str] = []
    for override in as_overrides(overrides):
        try:
            apply_override(raw, override)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(f"bad --set override in {path}:", problems)
    return validate_config(raw, source=str(path))


def validate_config(raw: Any, source: str = "config", accepted: bool = False) -> ExperimentConfig:
    """`accepted`: a config harness already ran with (a run's config.yaml), whose settings refused
    since are kept as they were (recipes.ACCEPTED)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    # Grids first, here, so that a bad value is named by the grid key and value that made it.
    raw, origins, problems = expand_grids(raw)
    if problems:
        raise ConfigError(f"{source}: {len(problems)} problem(s) in the config's grids:", problems)
    try:
        return ExperimentConfig.model_validate(raw, context={ACCEPTED: True} if accepted else None)
    except ValidationError as exc:
        errors = exc.errors()  # pydantic builds the list anew at each call
        unions, rest = split_union_errors(errors)
        located = [(loc, describe_union(_where(loc, raw, origins), branches)) for loc, branches in unions.items()]
        located += [(err["loc"], line) for err in rest for line in _describe_error(err, raw, origins).splitlines() if line.strip()]
        located += [(("models", i), f"{_where(('models', i), raw, origins)}: {p}") for i, p in _unchecked_spec_problems(raw, errors)]
        ordered = [line for _, line in sorted(located, key=lambda item: _in_file_order(item[0]))]
        problems = list(dict.fromkeys(ordered))  # a grid key's problem is every member's: listed once
        raise ConfigError(f"{source}: {len(problems)} problem(s) in the config:", problems) from None


_SECTIONS = list(ExperimentConfig.model_fields)  # the order a config's sections are reported in


def _in_file_order(loc: tuple) -> tuple[int, int]:
    """Problems in the order of the config's sections, a model's together (stable within each)."""
    section = _SECTIONS.index(loc[0]) if loc and loc[0] in _SECTIONS else len(_SECTIONS)
    return section, loc[1] if len(loc) > 1 and loc[0] == "models" and isinstance(loc[1], int) else -1


def _unchecked_spec_problems(raw: dict, errors: list[dict]) -> list[tuple[int, str]]:
    """A model's arch, backbone and options are checked after its fields validate (they depend on
    each other): one with a bad field (its loss, its optimizer) had them unchecked, and a wrong
    backbone beside a wrong loss was said only once the loss was mended. Checked here from the
    entry as written, so that every problem is listed at once."""
    failed = {err["loc"][1] for err in errors if len(err["loc"]) > 2 and err["loc"][0] == "models" and isinstance(err["loc"][1], int)}
    checked = {err["loc"][1] for err in errors if len(err["loc"]) == 2 and err["loc"][0] == "models"}
    entries = raw.get("models") if isinstance(raw.get("models"), list) else []
    found = []
    for i in sorted(failed - checked):
        entry = entries[i] if i < len(entries) and isinstance(entries[i], dict) else {}
        arch, backbone, options = entry.get("arch"), entry.get("backbone"), entry.get("options") or {}
        if isinstance(arch, str) and isinstance(backbone, str | None) and isinstance(options, dict):
            found += [(i, problem) for problem in check_spec(arch, backbone, options)]
    return found


def as_overrides(overrides: Overrides) -> list[str]:
    """`key.path=value` overrides as a list: the API takes one as a plain string too (iterated, a
    string would be applied character by character), and a mapping of key paths to values, as a
    notebook writes them (`{"train.epochs": 1, "data.image_size": [64, 64]}`; each value written as
    JSON, which the override reads as the YAML it is)."""
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return list(overrides or [])


def _read_yaml(path: Path) -> Any:
    if path.is_dir():
        if (path / "run.json").is_file() and (path / "config.yaml").is_file():  # a run's folder, where its config was meant
            raise ConfigError(f"config file {str(path)!r} is a run's folder: `harness resume {path}` continues it if it was "
                              f"interrupted, and its config.yaml ({path / 'config.yaml'}) trains the same experiment again")
        raise ConfigError(f"config file {str(path)!r} is a folder: give the experiment's YAML file in it")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # an editor's "Unicode" (UTF-16) or a legacy code page
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason}): "
                          "save it as UTF-8 (an editor's 'Unicode' is UTF-16)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader that refuses repeated keys
    except _RepeatedKey as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "'\\t'" in problem:
            problem += " (YAML indents with spaces only: replace the tab with spaces)"
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}") from None
    if raw is None:
        raise ConfigError(f"{path}: the file is empty (an experiment is a mapping: name, data, models, train, ...)")
    return raw


class _RepeatedKey(ValueError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error: PyYAML keeps
    the last silently, so a second `train:` section (an edit pasted below the first) would drop
    every setting of the first without a word."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`, then keys that override it: YAML's own idiom
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _RepeatedKey(f"key {key!r} is given twice in one mapping, at lines {seen[key] + 1} and "
                                   f"{key_node.start_mark.line + 1}; YAML would keep only the last: merge them")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


# ---------------------------------------------------------------------------------------------
# --set overrides


BRACKETED = re.compile(r"\[\s*['\"]?([\w@.-]+?)['\"]?\s*\]")  # models[0], models["unet"]


def apply_override(raw: dict, override: str) -> None:
    """Apply `a.b.c=value` in place. The value is parsed as YAML so `3`, `true`, `[96, 96]` are typed;
    pydantic then checks it against the schema like any other value. A list of models may be
    indexed by position (`models.0.backbone`) or by model name (`models.unet.backbone`; a name with
    dots as well: `models.unet-lr0.003.backbone`)."""
    key, parts, value = _parsed(override)
    node: Any = raw
    schema: Any = ExperimentConfig
    remaining, done = deque(parts), []
    while remaining:
        part = remaining.popleft()
        if isinstance(node, list):  # an item's name may hold dots (unet-lr0.003): the longest name that matches
            part = _item_name(node, part, remaining)
        done.append(part)
        last, where = not remaining, ".".join(done)
        if isinstance(node, list):
            index = _list_index(node, part, where)
            if last:
                node[index] = value
                return
            node = node[index]
            schema = _item_type(schema)
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {'.'.join(done[:-1])} is not a mapping")
        fields = _field_names(schema)
        if fields is not None and part not in fields:
            raise ConfigError(f"--set {key}: unknown key {where!r}{unknown_key_hint(schema, part, where.rpartition('.')[0])}")
        if last:
            node[part] = value
            return
        if part == GRID and schema is not ExperimentConfig:
            # grid keys are dotted paths themselves: models.unet.grid.optimizer.learning_rate=[...]
            grid = node[part] if isinstance(node.get(part), dict) else {}
            node[part] = {**grid, ".".join(remaining): value}
            return
        child_schema = _field_type(schema, part)
        if part not in node or node[part] is None:
            node[part] = [] if _is_list(child_schema) else {}
        node = node[part]
        schema = child_schema


def _parsed(override: str) -> tuple[str, list[str], Any]:
    """(the key as given, its dotted parts, the value parsed as YAML) of `a.b.c=value`."""
    if "=" not in override:
        raise ConfigError(f"{override!r}: expected key.path=value")
    key, _, text = override.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"{override!r}: empty key path")
    if BRACKETED.search(key):  # jq's and Python's way to index a list; here an item is one more dotted part
        meant = BRACKETED.sub(r".\1", key.strip())
        raise ConfigError(f"--set {key}: a list's item is a dotted part, its position or its name (models.0, models.unet): did you mean --set {meant}={text} ?")
    try:
        return key, parts, yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return key, parts, text


def _item_name(items: list, part: str, remaining: deque) -> str:
    """`part`, or the longest item name that starts with it and goes on through the next parts
    (models.unet-lr0.003.backbone: `unet-lr0.003`), those parts then taken from `remaining`."""
    names = {item.get("name") for item in items if isinstance(item, dict)}
    following = list(remaining)
    for count in range(len(following), 0, -1):
        name = ".".join([part, *following[:count]])
        if name in names:
            for _ in range(count):
                remaining.popleft()
            return name
    return part


def _list_index(items: list, part: str, where: str) -> int:
    if part.lstrip("-").isdigit():
        index = int(part)
        if -len(items) <= index < len(items):
            return index
        raise ConfigError(f"--set {where}: index {index} out of range (the list has {len(items)} items)")
    names = [item.get("name") for item in items if isinstance(item, dict)]
    if part in names:
        return names.index(part)
    raise ConfigError(f"--set {where}: no item named {part!r}{did_you_mean(part, [n for n in names if n])}")


# ---------------------------------------------------------------------------------------------
# Schema introspection, for did-you-mean hints on unknown keys


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated so `OptimizerSpec | None` gives OptimizerSpec."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else annotation
    return annotation


def _field_names(schema: Any) -> list[str] | None:
    schema = _unwrap(schema)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return list(schema.model_fields)
    return None


def _field_type(schema: Any, name: str) -> Any:
    schema = _unwrap(schema)
    if isinstance(schema, type) and issubclass(schema, BaseModel) and name in schema.model_fields:
        return schema.model_fields[name].annotation
    return None


def _is_list(schema: Any) -> bool:
    return typing.get_origin(_unwrap(schema)) is list


def _item_type(schema: Any) -> Any:
    args = typing.get_args(_unwrap(schema))
    return args[0] if args else None


# Other tools' names for harness's keys (Keras's `validation_split`, segmentation-models' and
# timm's `encoder` for a backbone, ...), each looked for where the key was written.
_SAID_OTHERWISE = {
    "lr": "learning_rate", "bs": "batch_size", "size": "image_size", "img_size": "image_size", "input_size": "image_size",
    "validation_split": "val_fraction", "num_classes": "classes", "n_classes": "classes",
    "encoder": "backbone", "encoder_name": "backbone", "backbone_name": "backbone", "gpus": "devices", "num_gpus": "devices",
}


def unknown_key_hint(schema: Any, key: str, section: str) -> str:
    """The tail of "unknown key" for `key` in the mapping `section` of type `schema`: a close name
    there; else the same key one or two mappings down (`train.learning_rate` is a key of
    `train.optimizer`); else the same key in another section (`train.batch_size` is data's);
    else every key there."""
    fields = _field_names(schema) or []
    sought = _SAID_OTHERWISE.get(key, key)
    prefix = f"{section}." if section else ""
    if sought != key and sought in fields:
        return f"; did you mean {prefix}{sought}?"
    if closest(key, fields):
        return did_you_mean(key, fields)
    if home := _nested_home(schema, sought):
        return f"; did you mean {prefix}{home}? ({sought} is a key of {prefix}{home.rpartition('.')[0]})"
    if section and (other := _home_elsewhere(sought)):
        owner = other.rpartition(".")[0]
        return f"; did you mean {other}? ({sought} is a key of {owner + ', not of ' + section if owner else 'the top level'})"
    return did_you_mean(key, fields)


def _home_elsewhere(key: str) -> str | None:
    """Where in the whole config `key` is a key: the top level (`seed`), or a section's (`data.batch_size`)."""
    return key if key in ExperimentConfig.model_fields else _nested_home(ExperimentConfig, key)


def _nested_home(schema: Any, key: str, depth: int = 2) -> str | None:
    """`optimizer.learning_rate` for `learning_rate` in a train section: the path, within `schema`,
    of the nearest mapping (not a list's item) that has `key`."""
    sections = [(name, _field_type(schema, name)) for name in _field_names(schema) or []]
    sections = [(name, child) for name, child in sections if _field_names(child) is not None]
    for name, child in sections:
        if key in _field_names(child):
            return f"{name}.{key}"
    for name, child in sections if depth > 1 else []:
        if deeper := _nested_home(child, key, depth - 1):
            return f"{name}.{deeper}"
    return None


def _schema_at(loc: tuple) -> Any:
    schema: Any = ExperimentConfig
    for part in loc:
        if isinstance(part, int):
            schema = _item_type(schema)
        else:
            schema = _field_type(schema, part)
        if schema is None:
            return None
    return schema


def _loc_name(loc: tuple, raw: Any) -> str:
    """`models.1.backbone`, with the model's name added when it has one: `models.1(unet).backbone`."""
    parts: list[str] = []
    node = raw
    for part in loc:
        label = str(part)
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            node = node[part]
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                label = f"{part}({node['name']})"
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            node = None
        parts.append(label)
    return ".".join(parts) or "(top level)"


def _shape_hint(loc: tuple, kind: str, got: Any) -> str | None:
    """A section written in another shape than the schema's, said with the shape to write: the
    models as a mapping of names (`models: {unet: {arch: Unet}}`, as some tools take them) or an
    entry as a bare name, instead of pydantic's "instance of ModelSpec"."""
    if loc == ("models",) and kind == "list_type" and isinstance(got, dict) and got:
        name, entry = next(iter(got.items()))
        fields = ", ".join(f"{k}: {v}" for k, v in entry.items()) if isinstance(entry, dict) else f"arch: {entry}"
        return f"a list of entries, each with its name inside: `- {{name: {name}, {fields}}}`, not a mapping from names"
    if kind == "model_type" and len(loc) == 2 and loc[0] == "models" and not isinstance(got, dict):
        return f"an entry is a mapping with at least a name and an arch, e.g. `{{name: {got}, arch: {got}}}` (got {got!r})"
    if kind == "path_type":  # pydantic: "Input is not a valid path for <class 'pathlib.Path'>"
        sized = {"images": "train_size", "val_images": "val_size", "test_images": "test_size"}.get(str(loc[-1]))
        count = f"; a number of synthetic images is data.{sized}" if sized and isinstance(got, int) else ""
        return f"a path to a folder or file is expected here (got {got!r}){count}"
    if kind == "model_type":
        named = isinstance(got, str) and "name" in (_field_names(_schema_at(loc)) or [])  # `optimizer: adam` for `optimizer: {name: adam}`
        return f"a mapping of keys (key: value) is expected here (got {got!r}" + (f"; did you mean {{name: {got}}}?)" if named else ")")
    return None


def _where(loc: tuple, raw: Any, origins: dict[int, GridOrigin] | None) -> str:
    """The key a problem is about; a grid's member named by the grid key and value that made it."""
    if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int) and loc[1] in (origins or {}):
        member = raw["models"][loc[1]].get("name")
        return ".".join([origins[loc[1]].describe(member), *map(str, loc[2:])])
    return _loc_name(loc, raw)


def _grid_key_at(loc: tuple, origins: dict[int, GridOrigin] | None) -> str | None:
    """The grid key (`optimizer.lr`) a member's problem at `loc` is at, if the grid set it."""
    if len(loc) > 2 and loc[0] == "models" and loc[1] in (origins or {}):
        dotted = ".".join(map(str, loc[2:]))
        return dotted if dotted in origins[loc[1]].values else None
    return None


def _describe_error(err: dict, raw: Any, origins: dict[int, GridOrigin] | None = None) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # pydantic reports `tuple[int, int]` positions and union branches as extra loc parts.
    loc = tuple(p for p in loc if p not in ("int", "str", "float", "bool"))
    where = _where(loc, raw, origins)
    kind = err["type"]
    if kind == "extra_forbidden":
        if grid_key := _grid_key_at(loc, origins):  # the grid's own key, not one member's: said once, as written
            entry, section = origins[loc[1]].entry, ".".join(map(str, loc[2:-1]))
            return f"{entry}.grid.{grid_key}: unknown key of a model entry{unknown_key_hint(_schema_at(loc[:-1]), str(loc[-1]), section)}"
        return f"{where}: unknown key{unknown_key_hint(_schema_at(loc[:-1]), str(loc[-1]), where.rpartition('.')[0])}"
    if kind == "missing":
        return f"{where}: required key is missing"
    if shape := _shape_hint(loc, kind, err.get("input")):
        return f"{where}: {shape}"
    message = re.sub(r"^(Value error|Assertion failed), ", "", err["msg"])
    if kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") in PATTERN_RULES:
        message = PATTERN_RULES[err["ctx"]["pattern"]]
    if not loc:  # a check of the whole config: each line names its own keys, one problem a line
        return message
    got = err.get("input")
    shown = "" if kind.startswith("value_error") or isinstance(got, (dict, list)) else f" (got {got!r})"
    if kind == "literal_error" and isinstance(got, str) and (close := closest(got, re.findall(r"'([^']*)'", err["ctx"]["expected"]))):
        shown = f" (got {got!r}; did you mean {close!r}?)"
    return f"{where}: {message}{shown}"
