"""What several commands share on the command line: the --env/--conf-dir parent,
loading the pipeline a command names, and the argument types argparse checks."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from ingest.kafka.offsets import Offsets, from_json
from ingest.spec.loader import Loaded, load_file
from ingest.spec.settings import DEFAULT_ENV, Settings, load_settings


def environment() -> argparse.ArgumentParser:
    """--env / --conf-dir, shared by every command that reads a pipeline."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--env", default=DEFAULT_ENV,
                         help="environment: reads conf/ENV.yaml for ${VAR} values (default: local)")
    options.add_argument("--conf-dir", default=None, metavar="DIR",
                         help="folder of ENV.yaml files (default: $INGEST_CONF_DIR or ./conf)")
    return options


def pipeline_file(command: argparse.ArgumentParser) -> None:
    """The FILE argument of a command that reads one pipeline."""
    command.add_argument("file", metavar="FILE", help="a pipeline file")


def settings_of(args) -> Settings:
    return load_settings(args.env, args.conf_dir)


def load_one(args, settings: Settings | None = None) -> Loaded:
    """The pipeline `args.file` names; its secrets stay on `args` so that `cli.main`
    masks them in any error the command then raises, its environment's settings for `session`."""
    args.settings = settings_of(args) if settings is None else settings
    loaded = load_file(args.file, settings=args.settings)
    args.secrets = loaded.pipeline.secret_values
    return loaded


def session(args, app_name: str):
    """The SparkSession of a command that read its pipeline with `load_one`: a JVM started
    here gets the environment's `session:` settings (master, driver memory)."""
    from ingest.platform.session import get_session

    return get_session(app_name, local_conf=args.settings.session_conf)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def timestamp_ms(text: str) -> int:
    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time; expected ISO 8601 "
                                         "(2026-11-23T09:00:00Z) or Unix milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def offsets_json(text: str) -> Offsets:
    try:
        return from_json(json.loads(text))
    except (ValueError, AttributeError, TypeError):
        raise argparse.ArgumentTypeError(f"{text!r} is not {{topic: {{partition: offset}}}} JSON") from None


def topic_to_create(text: str) -> tuple[str, int]:
    name, _, partitions = text.partition(":")
    if not name or (partitions and (not partitions.isdigit() or int(partitions) < 1)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or NAME:PARTITIONS (a whole number >= 1)")
    return name, int(partitions or 1)
