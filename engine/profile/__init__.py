"""Hardware feedback for the Judge: Nsight Compute runs and parsing, GPU specs, roofline summaries, and the
PyTorch-profiler fallback for machines without counters. Pure Python; the GPU work runs in subprocesses."""

from engine.profile.availability import ProfileUnavailable, check_profiling_available
from engine.profile.fallback import summarize_torch_profiler
from engine.profile.result import ProfileResult
from engine.profile.runner import profile_with_ncu
from engine.profile.specs import GpuSpec, format_for_prompt, lookup, spec_for_device
from engine.profile.summary import ProfileSummary, summarize

__all__ = [
    "GpuSpec",
    "ProfileResult",
    "ProfileSummary",
    "ProfileUnavailable",
    "check_profiling_available",
    "format_for_prompt",
    "lookup",
    "profile_with_ncu",
    "spec_for_device",
    "summarize",
    "summarize_torch_profiler",
]
