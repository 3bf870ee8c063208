"""The project's URLs plus play mode's, until studio/urls.py includes runs.play_urls."""
from django.urls import include, path

from studio.urls import urlpatterns as studio_urlpatterns

urlpatterns = [path("t/<slug:team>/", include("runs.play_urls")), *studio_urlpatterns]
