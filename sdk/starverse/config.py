"""Where the SDK and CLI find the platform and the token: arguments, then the environment, then a file.

The file is `$XDG_CONFIG_HOME/starverse/config.toml` (default `~/.config/starverse/config.toml`),
written by `starverse login` readable by its owner only (0600), in a folder only they can enter.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from starverse.errors import ConfigError

URL_VARIABLE = "STARVERSE_URL"
KEY_VARIABLE = "STARVERSE_API_KEY"
CONFIG_VARIABLE = "STARVERSE_CONFIG"


@dataclass(frozen=True)
class Config:
    url: str
    api_key: str | None


def config_path() -> Path:
    if os.environ.get(CONFIG_VARIABLE):
        return Path(os.environ[CONFIG_VARIABLE]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "starverse" / "config.toml"


def read_file(path: Path | None = None) -> dict:
    path = path or config_path()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(
            f"Can't read the config file {path}: {error}. Fix it or run `starverse login` again."
        ) from None
    return {key: value for key, value in data.items() if isinstance(value, str)}


def load_config(url: str | None = None, api_key: str | None = None, *, need_key: bool = True) -> Config:
    """The URL and key to use; ConfigError says what is missing and how to set it."""
    stored = read_file()
    url = url or os.environ.get(URL_VARIABLE) or stored.get("url")
    api_key = api_key or os.environ.get(KEY_VARIABLE) or stored.get("token")
    if not url:
        raise ConfigError(
            f"No Starverse URL: set {URL_VARIABLE} (e.g. http://127.0.0.1:8000) or run `starverse login`."
        )
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"The Starverse URL {url!r} must start with http:// or https://.")
    if need_key and not api_key:
        raise ConfigError(
            f"No API key: set {KEY_VARIABLE}, run `starverse login`, or create a token on the dashboard's "
            "API tokens page."
        )
    return Config(url=url.rstrip("/"), api_key=api_key or None)


def save_config(url: str, token: str, username: str = "", path: Path | None = None) -> Path:
    """Write the file with mode 0600 from the start (never world-readable, not even for a moment)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = [f"url = {toml_string(url)}", f"token = {toml_string(token)}"]
    if username:
        lines.append(f"username = {toml_string(username)}")
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.chmod(temporary, 0o600)  # in case the file existed with wider rights
    os.replace(temporary, path)
    return path


def toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
