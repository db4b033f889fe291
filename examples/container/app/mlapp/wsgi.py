"""WSGI entry point: gunicorn.conf.py serves mlapp.wsgi:application."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlapp.settings")

application = get_wsgi_application()
