"""Django settings for mlapp: no database, no sessions, no templates: a JSON API.

DJANGO_SETTINGS_MODULE picks this module (wsgi.py's default; the Kubernetes
manifests set it explicitly, as a deployment picks its settings per environment).
"""
import os

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# An example: a real deployment reads its key from a Secret.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "recycler-example-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["*"]  # behind a Service / ingress that checks Host itself

INSTALLED_APPS = []
MIDDLEWARE = []
ROOT_URLCONF = "mlapp.urls"
WSGI_APPLICATION = "mlapp.wsgi.application"
DATABASES = {}
USE_TZ = True
# Django sets the process's TZ from this (its default is America/Chicago):
# gunicorn's log lines from the worker would then disagree with recycler's.
TIME_ZONE = "UTC"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
