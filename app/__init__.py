"""The top floor: the ``cudawatch`` command, the demo and the Airflow step functions.

Everything here composes the layers below (``cudawatch`` contract and config; ``collector``,
``analytics``, ``reports``; ``simulator`` for the demo); nothing below imports it.
"""
