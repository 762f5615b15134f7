"""Curve labels: runs that differ only in their seed share one; any other difference keeps them apart. A run in
progress or a damaged one is passed over by name, never the end of ``mbpo plot``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mbpo import cli
from mbpo.config import load_config, to_yaml
from mbpo.errors import MbpoError
from mbpo.run.plotting import curves, run_label

pytestmark = pytest.mark.timeout(30)
HOPPER = Path(__file__).resolve().parents[2] / "configs" / "hopper_mbpo.yaml"


def labelled(tmp_path: Path, name: str, *overrides: str) -> tuple[str, int | None]:
    run = tmp_path / name
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config(HOPPER, list(overrides))))
    return run_label(run)


def test_critic_options_and_the_sync_trainer_get_curves_of_their_own(tmp_path: Path) -> None:
    plain, seed1 = labelled(tmp_path, "a"), labelled(tmp_path, "b", "seed=1")
    assert plain[0] == seed1[0] and (plain[1], seed1[1]) == (0, 1)
    others = [labelled(tmp_path, name, *o)[0] for name, o in (
        ("sync", ["trainer=sync"]), ("redq", ["agent.sac.num_critics=10", "agent.sac.num_min=2"]),
        ("droq", ["agent.sac.dropout=0.01", "agent.sac.layer_norm=true"]), ("crossq", ["agent.sac.crossq=true"]),
        ("delay", ["agent.sac.policy_delay=3"]))]
    assert len({plain[0], *others}) == 6, others
    assert others[1] == "Hopper-v5 MBPO-SAC, utd 20 (10 critics, min of 2, actor on min)"


def test_model_options_that_change_the_learners_data_get_curves_of_their_own(tmp_path: Path) -> None:
    plain = labelled(tmp_path, "a")[0]
    masked = labelled(tmp_path, "masked", "model.rollout_keep_fraction=0.5")[0]
    half = labelled(tmp_path, "half", "model.real_ratio=0.5")[0]
    beta = labelled(tmp_path, "beta", "model.nll_beta=0.5")[0]
    assert len({plain, masked, half, beta}) == 4
    assert masked == "Hopper-v5 MBPO-SAC, utd 20 [masking 0.5]"
    assert labelled(tmp_path, "free", "model.enabled=false")[0] == "Hopper-v5 SAC, utd 20"


def test_another_tools_run_with_a_config_of_its_own_is_named_by_its_run_json(tmp_path: Path) -> None:
    """benchmarks/sbx_crossq.py writes its own config.yaml (sbx's settings) and names the run in run.json."""
    run = tmp_path / "crossq_sbx-s0"
    run.mkdir()
    (run / "config.yaml").write_text("protocol:\n  env: Hopper-v5\nlearner: crossq_sbx\n")
    with pytest.raises(MbpoError, match="unknown config key 'protocol'"):  # not ours, and nothing names it
        run_label(run)
    (run / "run.json").write_text('{"label": "CrossQ (sbx)", "seed": 0}')
    assert run_label(run) == ("CrossQ (sbx)", 0)


HEADER = "env_steps,updates,wall_s,train_return,eval_return\n"
EVALUATED = HEADER + "100,1,1.0,,-1500.0\n200,2,2.0,,-1457.4\n"
DAMAGED = {  # run name: (metrics.csv, config.yaml or None for a good one, what the note must say)
    "binary": (bytes(range(256)) * 4, None, "metrics.csv is not a text CSV"),
    "non_numeric": ((HEADER + "abc,1,1.0,,-5\n").encode(), None, "env_steps 'abc' is not a number"),
    "foreign": (b"step,reward\n1,2\n", None, "has no env_steps and no eval_return column"),
    "broken_config": (EVALUATED.encode(), "env: [unclosed\n", "config.yaml is not valid YAML"),
}


def run_dir(tmp_path: Path, name: str, metrics: bytes | str, config: str | None = None) -> Path:
    """A run dir of ours: config.yaml (Hopper's, unless given) and metrics.csv as given."""
    run = tmp_path / name
    run.mkdir()
    (run / "config.yaml").write_text(config if config is not None else to_yaml(load_config(HOPPER)))
    (run / "metrics.csv").write_bytes(metrics.encode() if isinstance(metrics, str) else metrics)
    return run


def test_seeds_meet_at_the_same_env_steps_whatever_their_cadence_or_length(tmp_path: Path) -> None:
    """Evaluations were paired by position and every seed cut to the shortest: a resume that changed eval_every
    paired one seed's 656 with another's 512, and a seed still in progress ended the whole curve at its last
    evaluation. Points are matched by env step; a point a seed has not reached has the others only.
    """
    def metrics(evals: list[tuple[int, float]]) -> str:
        return HEADER + "".join(f"{steps},{i},{i}.0,,{value}\n" for i, (steps, value) in enumerate(evals))

    config = to_yaml(load_config(HOPPER))
    resumed = run_dir(tmp_path, "r1", metrics([(128, -1.0), (256, -2.0), (320, -3.0), (400, -4.0), (656, -6.0),
                                               (800, -8.0)]), config)
    full = run_dir(tmp_path, "r2", metrics([(128, -10.0), (256, -20.0), (320, -30.0), (448, -40.0), (512, -50.0),
                                            (640, -60.0), (704, -70.0), (800, -80.0)]),
                   config.replace("seed: 0", "seed: 1"))
    short = run_dir(tmp_path, "r3", metrics([(128, -100.0), (256, -200.0)]), config.replace("seed: 0", "seed: 2"))
    (curve,) = curves([resumed, full, short]).values()
    assert curve["seeds"] == [0, 1, 2]
    assert curve["x"] == [128.0, 256.0, 320.0, 448.0, 512.0, 648.0, 704.0, 800.0]  # 656 joins 640
    assert curve["counts"] == [3, 3, 2, 1, 1, 2, 1, 2]  # 400 is nearest 448, but further than half its spacing
    assert curve["values"][5] == [-6.0, -60.0] and curve["values"][7] == [-8.0, -80.0]


def test_a_last_row_cut_mid_write_is_not_plotted(tmp_path: Path) -> None:
    """A run in progress: -14 is the start of -1457.4, not an evaluation."""
    run = run_dir(tmp_path, "cut", EVALUATED + "300,3,3.0,,-14")
    (curve,) = curves([run]).values()
    assert (curve["x"], curve["median"]) == ([100.0, 200.0], [-1500.0, -1457.4])


def test_plot_passes_over_each_unreadable_run_naming_it_and_why_and_plots_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    good = run_dir(tmp_path, "good", EVALUATED)
    bad = [run_dir(tmp_path, name, metrics, config) for name, (metrics, config, _) in DAMAGED.items()]
    out = tmp_path / "chart.png"
    assert cli.main(["plot", str(good), *map(str, bad), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(out)] and out.read_bytes()[:4] == b"\x89PNG"
    notes = captured.err.strip().splitlines()
    assert len(notes) == len(DAMAGED)  # one line each
    for note, run, (_, _, why) in zip(notes, bad, DAMAGED.values(), strict=True):
        assert note.startswith(f"[mbpo] plot: passed over {run}: unreadable: {run}/") and why in note


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_plot_of_only_an_unreadable_run_is_one_line_and_exit_2(tmp_path: Path, name: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    metrics, config, why = DAMAGED[name]
    run = run_dir(tmp_path, name, metrics, config)
    assert cli.main(["plot", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: no run to plot: {run}: unreadable: ") and why in err
    assert "no evaluations yet" not in err  # a foreign CSV is not a run waiting for its first evaluation
    assert not list(run.glob("*.png"))


@pytest.mark.parametrize(("out", "why"), [
    ("missing/chart.png", r"the folder '\S+/missing' does not exist"),
    ("folder.png", r"is a folder; expected a file path in it \(e\.g\. \S+/folder\.png/out\.png\)"),
    ("/proc/chart.png", r"cannot be written \(.+\); write elsewhere"),
    ("chart.xyz", r"unknown image format '\.xyz'; expected one of (\.\w+, )*\.pdf, (\.\w+, )*\.png"),  # matplotlib's
    ("chart", r"no extension; expected one of (\.\w+, )*\.pdf, (\.\w+, )*\.png"),
])
def test_plot_to_an_output_it_cannot_write_is_one_line_and_exit_2(tmp_path: Path, out: str, why: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    good = run_dir(tmp_path, "good", EVALUATED)
    (tmp_path / "folder.png").mkdir()
    assert cli.main(["plot", str(good), "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --out {tmp_path / out}: ")
    assert re.search(why, err), err
    assert not [p for p in tmp_path.rglob("*.png") if p.is_file()] and not (tmp_path / "missing").exists()


def test_plot_names_the_format_by_the_extension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    good = run_dir(tmp_path, "good", EVALUATED)
    assert cli.main(["plot", str(good), "--out", str(tmp_path / "chart.pdf")]) == 0
    assert (tmp_path / "chart.pdf").read_bytes()[:5] == b"%PDF-"


def test_a_run_named_twice_is_plotted_once_into_its_own_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Spelled relative and absolute, one run was two (its seed counted twice) and its chart went to the current
    directory, as for several runs.
    """
    pytest.importorskip("matplotlib")
    good = run_dir(tmp_path, "good", EVALUATED)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "good", str(good), "./good/"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(Path("good") / "learning_curve.png")
    assert (good / "learning_curve.png").is_file() and not (tmp_path / "learning_curves.png").exists()


def test_runs_with_one_label_but_other_settings_get_curves_of_their_own_naming_the_difference(tmp_path: Path) -> None:
    """The label shows a few keys; any other key that differs (a batch size, num_envs, the evaluation cadence) keeps
    runs apart too, so seeds of different configs never make one curve with a band between them.
    """
    def run(name: str, *overrides: str) -> Path:
        return run_dir(tmp_path, name, EVALUATED, to_yaml(load_config(HOPPER, list(overrides))))

    seeds = [run("s0"), run("s1", "seed=1"), run("s2", "seed=2", "total_env_steps=999")]  # run length: one curve
    other = [run("b0", "agent.batch_size=64", "env.num_envs=2"), run("e0", "eval_every=500")]
    data = curves([*seeds, *other])
    label = labelled(tmp_path, "label")[0]
    # each label names every key that varies among the curves of its label
    assert data[f"{label} [agent.batch_size=256, env.num_envs=1, eval_every=2500]"]["seeds"] == [0, 1, 2]
    assert data[f"{label} [agent.batch_size=64, env.num_envs=2, eval_every=2500]"]["seeds"] == [0]
    assert data[f"{label} [agent.batch_size=256, env.num_envs=1, eval_every=500]"]["seeds"] == [0]
    assert len(data) == 3
    assert list(curves(seeds)) == [label]  # alone, the seeds keep the plain label


def test_runs_that_differ_in_a_key_a_resume_may_change_are_other_settings_not_other_seeds(tmp_path: Path) -> None:
    """A precision and debug mode may change on resume, so the run's identity leaves them out; a plot kept them
    in: an fp32 and a bf16 run (docs/benchmarks.md compares the two) made one curve, as seeds. The device is where
    a run computed, not what it learned: runs on two devices are seeds of one curve.
    """
    def run(name: str, *overrides: str) -> Path:
        return run_dir(tmp_path, name, EVALUATED, to_yaml(load_config(HOPPER, list(overrides))))

    data = curves([run("fp32", "agent.sac.precision=fp32"), run("bf16", "agent.sac.precision=bf16", "seed=1"),
                   run("debug", "debug=true", "seed=2")])
    assert sorted(len(curve["seeds"]) for curve in data.values()) == [1, 1, 1]
    assert any('agent.sac.precision="bf16"' in label for label in data)
    on_two_devices = curves([run("cpu", "device=cpu"), run("cuda", "device=cuda:1", "seed=1")])  # where, not what
    assert [curve["seeds"] for curve in on_two_devices.values()] == [[0, 1]]


def test_a_run_dir_given_twice_is_one_run_and_a_parent_of_runs_is_named_as_such(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Overlapping globs drew one run as two seeds (its median and range from a duplicate), and ``plot runs``
    (TensorBoard's --logdir habit) said "no evaluations yet" of a dir whose runs had evaluated.
    """
    runs = tmp_path / "runs"
    runs.mkdir()
    run = run_dir(runs, "a", EVALUATED)
    (drawn,) = curves([run, Path(f"{run}/"), runs / "." / "a"]).values()
    assert drawn["seeds"] == [0]
    assert capsys.readouterr().err == f"[mbpo] plot: {run} was given 3 times: one run, drawn once\n"
    assert cli.main(["plot", str(runs), "--out", str(tmp_path / "p.png")]) == 2
    assert capsys.readouterr().err == (f"error: no run to plot: {runs}: it holds 1 run dir(s), not a run (a): name "
                                       f"them, e.g. {runs / '*'}\n")


def test_a_health_panel_without_values_says_why_instead_of_warning(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """At thousands of envs a fit never sees 5 consecutive steps of one env, so the open-loop columns stay empty:
    the panel was drawn empty with matplotlib's "No artists with labels found to put in legend" warning.
    """
    import warnings

    pytest.importorskip("matplotlib")
    from mbpo.run.plotting import plot_model_health

    header = "env_steps,updates,wall_s,train_return,eval_return,model_err_delta,model_open_loop_err_5\n"
    run = run_dir(tmp_path, "scale", header + "100,1,1.0,,-1500.0,0.5,\n200,2,2.0,,-1400.0,0.4,\n")
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = plot_model_health([run], tmp_path / "health.png")
    assert out is not None and out.read_bytes()[:4] == b"\x89PNG"
    assert ("[mbpo] plot: open-loop state error along real trajectories: no values in these runs (needs 5 "
            "consecutive steps of one env between two model fits") in capsys.readouterr().err
