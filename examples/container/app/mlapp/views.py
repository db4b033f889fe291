"""The views, and the memory each one holds (sizes from the environment, in MiB)."""
import os
import threading
import time

from django.http import HttpResponse, JsonResponse

MiB = 1 << 20
MODEL_MIB = float(os.environ.get("MODEL_MIB", "8"))
LEAK_MIB = float(os.environ.get("LEAK_MIB", "20"))
SPIKE_MIB = float(os.environ.get("SPIKE_MIB", "150"))
SPIKE_SECONDS = float(os.environ.get("SPIKE_SECONDS", "2"))

_model = None
_model_lock = threading.Lock()  # gunicorn's gthread worker serves 2 requests at once
# The bug: every prediction keeps its intermediate buffers "for debugging", as
# long as the worker process lives. Only a recycle of the process gives it back.
_kept = []


def _resident(mib):
    """A buffer of MIB MiB whose every page is resident (bytearray zero-fills it,
    and the kernel counts each page it writes)."""
    return bytearray(int(mib * MiB))


def _load_model():
    global _model
    with _model_lock:
        if _model is None:
            _model = _resident(MODEL_MIB)  # the weights, loaded on first use
    return _model


def index(request):
    return HttpResponse("mlapp pid %d\n" % os.getpid(), content_type="text/plain")


def predict(request):
    model = _load_model()
    _kept.append(_resident(LEAK_MIB))
    return JsonResponse({
        "pid": os.getpid(),
        "prediction": len(model) % 7,
        "kept_mib": len(_kept) * LEAK_MIB,
    })


def gradcam(request):
    _load_model()
    heatmap = _resident(SPIKE_MIB)  # every layer's gradients, for one image
    time.sleep(SPIKE_SECONDS)
    held = len(heatmap)
    del heatmap  # freed: a large allocation is a mapping of its own, unmapped at once
    return JsonResponse({"pid": os.getpid(), "held_mib": held / MiB, "seconds": SPIKE_SECONDS})
