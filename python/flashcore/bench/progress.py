"""Progress display: tqdm when importable, else a plain counter on stderr.

Messages go through `write` so they do not tear the bar apart. When stderr is
not a terminal (a remote run whose log is read afterwards) the bar refreshes
rarely, so the log is not flooded with carriage-return updates.
"""

from __future__ import annotations

import sys
from typing import Optional


class Progress:
    def __init__(self, total: int, desc: str = "bench", stream=None, use_tqdm: Optional[bool] = None):
        self.total = total
        self.n = 0
        self.stream = stream or sys.stderr
        self._bar = None
        if use_tqdm is None or use_tqdm:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                tty = hasattr(self.stream, "isatty") and self.stream.isatty()
                self._bar = tqdm(total=total, desc=desc, file=self.stream, dynamic_ncols=True,
                                 mininterval=0.2 if tty else 10.0, leave=True)

    def set_label(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
        self._label = text

    def update(self, k: int = 1) -> None:
        self.n += k
        if self._bar is not None:
            self._bar.update(k)
        else:
            label = getattr(self, "_label", "")
            print(f"[{self.n}/{self.total}] {label}", file=self.stream, flush=True)

    def write(self, msg: str) -> None:
        if self._bar is not None:
            self._bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
