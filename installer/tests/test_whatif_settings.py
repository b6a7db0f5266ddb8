"""What a replay asks of the simulated cluster: Kueue's time-valued settings scaled with the speedup (and which),
and the Job that plays each trace job."""

from __future__ import annotations

from conftest import EXAMPLE

from konduktor.config.load import load_config
from konduktor.quotas.render import kueue_manager_settings
from konduktor.sim.workloads import PRIORITY_LABEL, QUEUE_LABEL, RUN_FOR
from konduktor.whatif.replay import job_manifest, kube_names, scaled_settings
from konduktor.whatif.trace import TraceJob


def test_kueue_timers_scale_with_the_speedup_and_say_which() -> None:
    settings = kueue_manager_settings(load_config(EXAMPLE).config)
    settings["admissionFairSharing"] = {"usageHalfLifeTime": "168h", "usageSamplingInterval": "5m"}
    scaled, said = scaled_settings(settings, 600)
    ready = scaled["waitForPodsReady"]
    assert ready["timeout"] == "30000ms"  # 10m / 600 = 1 s, but never below the floor of 30 s
    assert ready["recoveryTimeout"] == "30000ms"
    assert ready["requeuingStrategy"]["backoffBaseSeconds"] == 1  # 60 s / 600, at least Kueue's whole second
    assert ready["requeuingStrategy"]["backoffMaxSeconds"] == 6
    assert scaled["admissionFairSharing"] == {"usageHalfLifeTime": "1008000ms", "usageSamplingInterval": "500ms"}
    assert said == [
        "waitForPodsReady.timeout: 10m -> 30000ms",
        "waitForPodsReady.recoveryTimeout: 3m -> 30000ms",
        "waitForPodsReady.requeuingStrategy.backoffBaseSeconds: 60s -> 1s",
        "waitForPodsReady.requeuingStrategy.backoffMaxSeconds: 3600s -> 6s",
        "admissionFairSharing.usageHalfLifeTime: 168h -> 1008000ms",
        "admissionFairSharing.usageSamplingInterval: 5m -> 500ms",
    ]
    assert settings["waitForPodsReady"]["timeout"] == "10m"  # the config's own settings are left as they were
    assert scaled["fairSharing"] == settings["fairSharing"]  # not time-valued


def test_a_trace_job_becomes_a_kueue_job_that_runs_for_its_scaled_duration() -> None:
    config = load_config(EXAMPLE).config
    job = TraceJob("Train Big/1", 0, 3600, "team-a", 2, 8, "h100", "urgent")
    (name,) = kube_names([job])
    assert name == "w00000-train-big-1"
    manifest = job_manifest(config, job, name, speedup=60)
    assert manifest["metadata"]["namespace"] == "team-a"
    assert manifest["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert manifest["metadata"]["labels"][PRIORITY_LABEL] == "urgent"
    assert manifest["spec"]["parallelism"] == manifest["spec"]["completions"] == 2
    template = manifest["spec"]["template"]
    assert template["metadata"]["annotations"][RUN_FOR] == "60000ms"
    assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
