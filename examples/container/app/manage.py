#!/usr/bin/env python3
"""Django's command-line utility: `python3 manage.py check` in /srv/app."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlapp.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
