"""Names shared by the daemon, its HTTP client and the CLI, in a module that imports nothing: the CLI
reads them at start-up without loading httpx, pydantic-settings or FastAPI."""

#: The daemon's YAML settings file, when `--config` is not given.
CONFIG_ENV_VAR = "LAKEWARD_CONFIG"
#: The daemon's API for the CLI and scripts, and its default.
URL_ENV_VAR = "LAKEWARD_URL"
DEFAULT_URL = "http://127.0.0.1:8080"
#: The API bearer token of mutating calls.
TOKEN_ENV_VAR = "LAKEWARD_API_TOKEN"
#: Path prefix of the HTTP API's versioned routes.
API_PREFIX = "/api/v1"

__all__ = ["API_PREFIX", "CONFIG_ENV_VAR", "DEFAULT_URL", "TOKEN_ENV_VAR", "URL_ENV_VAR"]
