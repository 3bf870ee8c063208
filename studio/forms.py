from django import forms
from django.contrib.auth.forms import UserCreationForm

from .models import Role


class SignUpForm(UserCreationForm):
    team_name = forms.CharField(
        max_length=120, required=False, help_text="Optional: start a team now (you can join others later)."
    )


class TeamForm(forms.Form):
    name = forms.CharField(max_length=120)


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.AUTHOR)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, initial="my script")
