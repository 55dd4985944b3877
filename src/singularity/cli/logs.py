"""Log lines on stderr: readable text by default, only JSON lines with `--log-format json`.

In JSON mode every line a command writes to stderr is one JSON object: the being's events
(`cli.display.json_lines`), log records and Python warnings (`{"type": "log", ...}`), and
the final error (`{"type": "error", ...}`, with the text `singularity: <error>` the plain
mode prints).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

from singularity.jsoncodec import compact

TEXT_FORMAT = "%(asctime)s %(levelname)s %(message)s"


class JsonFormatter(logging.Formatter):
    """A log record as `{"type": "log", "at", "level", "logger", "message"}`."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line = {
            "type": "log",
            "at": at.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return compact(line)


def configure_text_logs() -> None:
    """Readable log lines on stderr (the default of every command)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=TEXT_FORMAT)
    logging.captureWarnings(False)
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):  # a JSON command ran in this process
            handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The MCP SDK logs every HTTP request and session event of a skill server at INFO.
    for name in ("httpx2", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)


def use_json_logs() -> None:
    """Every log record and Python warning from now on as one JSON line."""
    logging.captureWarnings(True)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonFormatter())


def json_logs() -> bool:
    """Whether stderr speaks only JSON lines."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def report_error(text: str, exit_code: int) -> None:
    """The command's final error: `text` on stderr, as a JSON line in JSON mode."""
    if json_logs():
        line = compact({"type": "error", "message": text, "exit_code": exit_code})
        sys.stderr.write(line + "\n")
    else:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()
