"""The quality card's forms (Audit's seeds, Re-verify's source version): each refusal is shown beside its
field on the card with what was typed kept, as New run's form does."""
from django import forms
from django.http import Http404

from environments import selectors as env_selectors

from ..seeds import SEEDS_HELP, parse_seeds
from .services import DEFAULT_SEEDS

VERSION_NUMBER_MAX = 2**63 - 1


class AuditForm(forms.Form):
    seeds = forms.CharField(required=False, initial="0-4", help_text=SEEDS_HELP)

    def clean_seeds(self):
        text = self.cleaned_data["seeds"].strip()
        if not text:
            return list(DEFAULT_SEEDS)
        try:
            return parse_seeds(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Seeds: {exc}.") from None


class ReverifyForm(forms.Form):
    """The version whose stored rollouts are re-scored (`source`, a number of the same environment)."""

    source = forms.IntegerField(required=False, min_value=1, max_value=VERSION_NUMBER_MAX, error_messages={
        "invalid": "Give a version number of this environment, e.g. 1.",
        "min_value": "Version numbers start at 1.",
        "max_value": "No version has a number that large.",
    })

    def __init__(self, *args, env, version, **kwargs):
        super().__init__(*args, **kwargs)
        self.env, self.version = env, version

    def clean_source(self):
        number = self.cleaned_data["source"] or self.version.number
        try:
            return env_selectors.version_get(environment=self.env, number=number)
        except Http404:
            raise forms.ValidationError(f"{self.env.slug} has no version {number}.") from None
