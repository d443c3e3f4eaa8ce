"""The PyTorch host (examples/torch_host.py) on CPU torch with tiny layers:
every schedule's final hidden states hash the same, and the hash depends
on the rows. Skipped where torch is not installed (CI does not install it;
the device machine's runs are in docs/gpu.md). The delivery of rows and
their device decode are engram.torch's, tested in test_torch.py."""

import json
import os
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import torch_host  # noqa: E402

import engram  # noqa: E402


def args_for(model, tokens_file, out, *more):
    return ["--model", str(model), "--tokens", str(tokens_file), "--profile", "tiny",
            "--layers", "16", "--prefill", "300", "--decode", "12", "--ubatch", "128",
            "--device", "cpu", "--json", str(out), *more]


@pytest.fixture
def tokens_file(tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(rng.integers(0, 129280, 400).tolist()))
    return path


@pytest.mark.parametrize("sweep", ["layer", "chunk"])
def test_every_schedule_hashes_alike(model, tokens_file, tmp_path, sweep):
    """Every schedule, with the engine's f32 rows and with its raw rows
    decoded by torch: one hash (so the device decode is the engine's, bit
    for bit, on real rows)."""
    every = torch_host.SCHEDULES + torch_host.EXTRA_SCHEDULES
    results = []
    for rows in ("f32", "raw"):
        out = tmp_path / f"host-{rows}.json"
        assert torch_host.main(args_for(model, tokens_file, out, "--sweep", sweep, "--rows", rows,
                                        "--schedule", ",".join(every),
                                        "--device-iops", "50000")) == 0
        doc = json.loads(out.read_text())
        assert doc["args"]["rows"] == rows
        assert [r["schedule"] for r in doc["results"]] == list(every)
        full = next(r for r in doc["results"] if r["schedule"] == "full")
        assert full["decode"]["stall"]["per_token_us"]["count"] == 12
        # `shadow` takes pinned's rows, yet its engine read every step's.
        shadow = next(r for r in doc["results"] if r["schedule"] == "shadow")
        assert shadow["decode"]["stall"]["rows_from_storage"] > 0
        assert all(t["reads_issued"] > 0 for t in shadow["decode"]["stall"]["rows_per_table"])
        assert shadow["prefill"]["stall"]["per_token_us"]["count"] == 0
        # One series per table (empty on CPU: no CUDA events to time).
        assert set(full["prefill"]["gpu_engram_ms_by_chunk"]) == {"0", "1"}
        # And no GPU times for the floor: no floor in the summary.
        assert full["prefill"]["floor_points"] == []
        assert not any("floor_s" in row for row in doc["summary"])
        results += doc["results"]
    assert len({r["prefill"]["checksum"] for r in results}) == 1
    assert len({r["decode"]["checksum"] for r in results}) == 1


def test_runs_on_one_stage_hash_as_runs_on_stages_of_their_own(model, tokens_file, tmp_path):
    """Every run of a process shares one decoder (its caches reset per
    run): the same hashes as a decoder made for each run, in any order."""
    sums = set()
    for extra in ([], ["--stage-per-run"]):
        out = tmp_path / "host.json"
        assert torch_host.main(args_for(model, tokens_file, out, "--repeat", "2",
                                        "--schedule", "sync,resident,pinned", *extra)) == 0
        doc = json.loads(out.read_text())
        sums |= {(r["prefill"]["checksum"], r["decode"]["checksum"]) for r in doc["results"]}
    assert len(sums) == 1, sums


def test_both_step_edges_hash_alike(model, tokens_file, tmp_path):
    """The next step's embedding queued ahead of the sampled token (read
    from the device at the step's position) and the step launched after the
    sync give the same hidden states, with the engine's rows and without."""
    sums = set()
    for edge in ("ahead", "sync"):
        out = tmp_path / f"edge-{edge}.json"
        assert torch_host.main(args_for(model, tokens_file, out, "--step-edge", edge,
                                        "--schedule", "resident,full")) == 0
        doc = json.loads(out.read_text())
        assert doc["args"]["step_edge"] == edge
        full = next(r for r in doc["results"] if r["schedule"] == "full")
        assert full["decode"]["stall"]["per_token_us"]["count"] == 12
        sums |= {r["decode"]["checksum"] for r in doc["results"]}
    assert len(sums) == 1, sums


def test_rows_auto_takes_raw_rows_of_an_e4m3_model_and_f32_of_another(models, tokens_file,
                                                                       tmp_path):
    for name, want in (("row264", "raw"), ("lloyd4", "f32")):
        out = tmp_path / f"{name}.json"
        assert torch_host.main(args_for(models[name], tokens_file, out, "--decode", "2",
                                        "--schedule", "resident,overlap")) == 0
        assert json.loads(out.read_text())["args"]["rows"] == want
    with pytest.raises(SystemExit):
        torch_host.main(args_for(models["lloyd4"], tokens_file, tmp_path / "x.json",
                                 "--rows", "raw"))


def test_the_hash_depends_on_the_rows(model, tokens_file):
    ns = torch_host.build_parser().parse_args(args_for(model, tokens_file, "unused.json",
                                                       "--rows", "f32", "--cache-mib", "16"))
    ns.open_options = {}
    ns.sizes = torch_host.profile_sizes(ns)
    tokens = torch_host.load_tokens(ns)[:313]
    with engram.open(model, format="f32") as probe:
        info = probe.info
        ns.vocab = info.vocab_size
        ids = probe.sequence().row_ids(tokens)
        rows = torch_host.resident_rows(ns, probe, ids, torch.device("cpu"))
    base = torch_host.run_schedule(ns, "resident", tokens, ids, rows, info)
    index, values = rows.gpu[1]
    changed = torch_host.InMemoryRows([rows.gpu[0], (index, values * 2)], rows.host, rows.reads)
    other = torch_host.run_schedule(ns, "resident", tokens, ids, changed, info)
    assert base["prefill"]["checksum"] != other["prefill"]["checksum"]
    assert base["decode"]["checksum"] != other["decode"]["checksum"]
    # `pinned` moves the host copy's rows: doubling the device copy's does
    # not change its hash, so the schedule really reads the host copy.
    pinned = torch_host.run_schedule(ns, "pinned", tokens, ids, changed, info)
    assert pinned["decode"]["checksum"] == base["decode"]["checksum"]


def test_the_decode_step_matches_a_one_token_chunk():
    """Layer.step (fixed shapes: the whole cache, masked, what a CUDA graph
    holds) computes what Layer.forward computes for the same token."""
    import torch_model
    sizes = dict(torch_model.PROFILES["tiny"])
    dec = torch_model.Decoder(sizes, 3, {1: 0}, 2, 256, torch.device("cpu"), 20)
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randn(6, sizes["dim"], generator=gen)
    rows = torch.randn(7, 2, 256, generator=gen)
    token = torch.randn(1, sizes["dim"], generator=gen)

    def run(last_step):
        for layer in dec.layers:
            layer.reset()
        h = prompt
        for layer in dec.layers:
            h = layer.forward(h, rows[:6])
        h = token
        for layer in dec.layers:
            if last_step:
                h = layer.step(h, rows[6:], torch.tensor([6]))
            else:
                h = layer.forward(h, rows[6:])
        return h

    assert torch.allclose(run(True), run(False), atol=1e-5)


def test_a_calibrated_profile_needs_cuda(model, tokens_file, tmp_path):
    with pytest.raises(SystemExit, match="--ffn"):
        torch_host.main(args_for(model, tokens_file, tmp_path / "x.json", "--profile", "mac"))


def test_a_finished_stage_frees_its_decoder(model, tokens_file):
    """No reference cycle keeps a stage's decoder (on the GPU: its
    weights) alive after the runs on it: a next one would not fit."""
    import gc
    import weakref
    ns = torch_host.build_parser().parse_args(args_for(model, tokens_file, "unused.json",
                                                       "--rows", "raw"))
    ns.sizes = torch_host.profile_sizes(ns)
    tokens = torch_host.load_tokens(ns)[:313]
    with engram.open(model, format="f32") as probe:
        info = probe.info
        ids = probe.sequence().row_ids(tokens)
    gc.disable()
    try:
        rows = torch_host.InMemoryRows([], [], [])
        stage = torch_host.Stage(ns, info)
        host = torch_host.Host(ns, "sync", info, tokens, ids, rows, stage)
        decoder = weakref.ref(host.model)
        del host
        assert decoder() is not None, "the stage outlives a run on it"
        del stage
        assert decoder() is None
    finally:
        gc.enable()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux CPU affinity and two CPUs")
def test_host_cpu_keeps_the_engine_threads_off_the_forward_threads_cpu(model, tokens_file,
                                                                      tmp_path, monkeypatch):
    """--host-cpu: the engine's threads (made at open) run on the other
    CPUs, the forward thread on that one alone while it runs, the caller's
    CPUs come back after; the hashes are those of an unpinned run."""
    cpus = os.sched_getaffinity(0)
    host_cpu = max(cpus)
    seen = {}
    real_open = engram.open

    def open_and_look(*args, **kwargs):
        engine = real_open(*args, **kwargs)
        seen["engine"] = os.sched_getaffinity(0)  # what the engine's threads took
        return engine

    monkeypatch.setattr(torch_host.engram, "open", open_and_look)
    real_prefill = torch_host.Host.prefill

    def prefill_and_look(self, seq):
        seen["forward"] = os.sched_getaffinity(0)
        return real_prefill(self, seq)

    monkeypatch.setattr(torch_host.Host, "prefill", prefill_and_look)
    docs = []
    for more in ([], ["--host-cpu", str(host_cpu)]):
        out = tmp_path / f"host{len(more)}.json"
        assert torch_host.main(args_for(model, tokens_file, out, "--schedule", "overlap",
                                        *more)) == 0
        docs.append(json.loads(out.read_text()))
    assert seen == {"engine": cpus - {host_cpu}, "forward": {host_cpu}}
    assert os.sched_getaffinity(0) == cpus
    assert ({r["decode"]["checksum"] for r in docs[0]["results"]}
            == {r["decode"]["checksum"] for r in docs[1]["results"]})
    with pytest.raises(SystemExit):
        torch_host.main(args_for(model, tokens_file, tmp_path / "bad.json",
                                 "--host-cpu", str(max(cpus) + 1000)))


@pytest.mark.parametrize("more", [["--device-iops", "0"],
                                  ["--device-iops", "1000", "--schedule", "overlap"]])
def test_the_floor_needs_a_rate_and_residents_run(model, tokens_file, tmp_path, more):
    with pytest.raises(SystemExit):
        torch_host.main(args_for(model, tokens_file, tmp_path / "bad.json", *more))



def test_full_hints_a_draft_right_as_often_as_asked_and_alternatives_within_the_top_3():
    import random
    ns = torch_host.build_parser().parse_args(["--model", "m", "--draft", "0.79", "--top3", "0.95"])
    rng, actual, n = random.Random(3), 7, 20000
    offers = [torch_host.offer_hints(rng, actual, ns, 1000) for _ in range(n)]
    top1 = sum(o["tokens"] == [actual] for o in offers) / n
    top3 = sum(actual in o["tokens"] + o["alternatives"] for o in offers) / n
    assert abs(top1 - 0.79) < 0.015 and abs(top3 - 0.95) < 0.01, (top1, top3)
    for o in offers[:500]:
        ranked = o["tokens"] + o["alternatives"]
        assert len(set(ranked)) == 3
        assert o["alternative_probs"] == pytest.approx([0.08, 0.08])
    ns.top3 = 0.79  # no alternatives: a draft alone
    assert set(torch_host.offer_hints(rng, actual, ns, 1000)) == {"tokens", "draft_probs"}
