"""The URLs and hooks of the Django site serve.py runs (imported by Django once it is configured)."""
from django.contrib.auth import views as auth_views
from django.http import JsonResponse
from django.urls import include, path
from oauth2_provider import urls as dot_urls
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.views.generic import ProtectedResourceMetadataView


class ResourceServer(ProtectedResourceMetadataView):
    """Resource servers at /api/<name>/ that take django-oauth-toolkit's access tokens as its own
    views do: a token bound to resources (RFC 8707 `resource` on its token request) only where its
    URL is one of them or under one (its URL-prefix check); else a 401 with WWW-Authenticate: Bearer
    error="invalid_token", error_description="The access token is not valid for this resource."."""

    def get(self, request, name):
        return JsonResponse({"api": name, "user": request.resource_owner.get_username()})


urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    # django-oauth-toolkit, as its documentation deploys it: under a prefix (the issuer), and its
    # RFC 8414 metadata also at the origin's root (the RFC 8414 §3.1 form, .../<issuer path>).
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("", include((dot_urls.metadata_urlpatterns, "dot_metadata"))),
    # django-oidc-provider
    path("openid/", include("oidc_provider.urls", namespace="oidc_provider")),
    path("api/<slug:name>/", ResourceServer.as_view()),
]


class EmailValidator(OAuth2Validator):
    """django-oauth-toolkit's ID token: `sub` (the user's primary key) and, for scope "email", the
    email; no preferred_username (so a client's display name has to fall back on the email)."""

    oidc_claim_scope = dict(OAuth2Validator.oidc_claim_scope, email="email")

    def get_additional_claims(self, request):
        return {"email": request.user.email}


def userinfo(claims, user):
    """django-oidc-provider's claims (also put into its ID tokens): the standard profile ones."""
    claims["preferred_username"] = user.username
    claims["name"] = user.get_full_name()
    claims["email"] = user.email
    return claims
