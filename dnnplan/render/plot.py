"""`dnnplan plan --sweep --plot`: a figure (PNG, PDF or SVG) of predicted step time against devices
(needs matplotlib)."""

from __future__ import annotations

import io

from networks.errors import DnnplanError, short
from networks.writing import write_file


def pyplot(missing: str):
    """matplotlib's pyplot on the Agg backend (files only, no display); without matplotlib, the one
    line ``missing`` (what asked for a figure needs it) with the install hint."""
    try:  # matplotlib is the optional `plot` extra: imported only when a figure is asked for
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise DnnplanError(missing, hint="pip install 'dnnplan[plot]'") from None
    return plt


#: the figure formats written by the file's suffix (matplotlib's Agg backend writes each); any other suffix gets a PNG
FORMATS = ("png", "pdf", "svg")


#: image formats people name that the figures are not written in: refused, not written as a PNG under their name
OTHER_IMAGES = ("jpg", "jpeg", "gif", "bmp", "tif", "tiff", "webp", "eps", "ps")


def check_figure_path(flag: str, path: str | None) -> None:
    """One line for a figure file whose suffix names an image format other than :data:`FORMATS`, and
    for a name that names no file (empty, or ``-``: a figure is not written to a terminal)."""
    if path is not None and (not path.strip() or path == "-"):
        raise DnnplanError(f"{flag} {short(path)} names no file", hint=f"e.g. {flag} scaling.png")
    if path and "." in path.rsplit("/", 1)[-1] and path.rsplit(".", 1)[-1].lower() in OTHER_IMAGES:
        raise DnnplanError(f"{flag} {short(path)}: the figure is written as PNG, PDF or SVG",
                           hint="name the file .png, .pdf or .svg")


def figure_format(path: str) -> str:
    """The format ``path``'s suffix names (:data:`FORMATS`), else PNG."""
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return suffix if suffix in FORMATS else "png"


def save_figure(plt, fig, path: str, what: str, dpi: int) -> None:
    """Lay out ``fig``, write it to ``path`` in the format its suffix names (:func:`figure_format`;
    atomically: networks.writing, whose SystemFailure is the one line if it cannot be written) and
    close it."""
    fig.tight_layout()
    data = io.BytesIO()
    try:
        fig.savefig(data, dpi=dpi, format=figure_format(path))
    finally:
        plt.close(fig)
    write_file(path, data.getvalue())


def plot_sweep(rows: list[dict], path: str, title: str) -> None:
    """Step time against devices for the plan, data parallelism and ideal scaling, log-log."""
    plt = pyplot("--plot needs matplotlib")
    ok = [r for r in rows if "error" not in r]
    fig, ax = plt.subplots(figsize=(6, 4))
    ps = [r["devices"] for r in ok]
    ax.loglog(ps, [r["step_s"] for r in ok], "o-", label="plan")
    ax.loglog(ps, [r["data_step_s"] for r in ok], "s--", label="data parallel")
    if ok:
        ax.loglog(ps, [ok[0]["step_s"] * ok[0]["devices"] / p for p in ps], ":", color="grey", label="ideal")
    ax.set_xlabel("devices")
    ax.set_ylabel("predicted step (s)")
    ax.set_title(title)
    ax.legend()
    save_figure(plt, fig, path, "plot", 120)


def plot_machines(rows: list[dict], path: str, title: str) -> None:
    """Per machine, a line over device counts: with a token budget the days to train and their cost
    (device-hours where no price is given), else the step and its device-seconds; log-log."""
    plt = pyplot("--plot needs matplotlib")
    ok = [r for r in rows if "error" not in r]
    trained = any("train" in r for r in ok)
    priced = any((r.get("train") or {}).get("cost") is not None for r in ok)
    if trained:
        left, right = (lambda r: r["train"]["days"], "days to train"), \
            ((lambda r: r["train"]["cost"], "cost to train") if priced else
             (lambda r: r["train"]["device_hours"], "device-hours to train"))
    else:
        left, right = (lambda r: r["step_s"], "predicted step (s)"), (lambda r: r["device_s_per_step"],
                                                                     "device-seconds a step")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for machine in dict.fromkeys(r["machine"] for r in ok):
        mine = [r for r in ok if r["machine"] == machine]
        ps = [r["devices"] for r in mine]
        for ax, (value, _) in zip(axes, (left, right)):
            ax.loglog(ps, [value(r) for r in mine], "o-", label=machine)
    for ax, (_, label) in zip(axes, (left, right)):
        ax.set_xlabel("devices")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(title)
    save_figure(plt, fig, path, "plot", 120)
