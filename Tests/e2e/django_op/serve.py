"""Two real OpenID Connect providers in one Django site on 127.0.0.1, for msso's interop tests:

- django-oauth-toolkit (OIDC enabled), issuer http://127.0.0.1:PORT/o; its RFC 7009 revocation
  endpoint is named only in its RFC 8414 metadata, not in its OpenID discovery;
- django-oidc-provider, issuer http://127.0.0.1:PORT/openid; no revocation endpoint at all.

Both share Django's users and its login page (/accounts/login/); each has its own consent page.
Resource servers at /api/<name>/ take django-oauth-toolkit's access tokens, checking the aud of one
bound to resources (RFC 8707 `resource` on its token request; op_site.ResourceServer).

    python serve.py SPEC.json

SPEC: {"dir", "port", "token_ttl" (access tokens, seconds), "users": {name: {password, email,
first_name, last_name}}, "dot": [client...], "op": [client...], optionally "dot_settings" (more
OAUTH2_PROVIDER settings, e.g. {"ROTATE_REFRESH_TOKEN": false})}, a client being {client_id,
client_secret, grant ("password" | "authorization-code", django-oauth-toolkit: one per client),
redirect_uri}. Starts from scratch in DIR (SQLite database, signing keys), then serves until
killed; requests are logged to stderr.
"""
import json
import os
import secrets
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

LOGIN_TEMPLATE = """<!DOCTYPE html>
<html><head><title>Sign in</title></head><body>
<h1>Sign in</h1>
{% if form.errors %}<p id="error">Your username and password did not match.</p>{% endif %}
<form method="post" action="{% url 'login' %}">{% csrf_token %}
<label>Username <input id="username" name="username" autofocus></label>
<label>Password <input id="password" name="password" type="password"></label>
<input type="hidden" name="next" value="{{ next }}">
<input id="sign-in" type="submit" value="Sign in">
</form></body></html>
"""


def rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()


def configure(spec):
    from django.conf import settings

    site = f"http://127.0.0.1:{spec['port']}"
    settings.configure(
        DEBUG=False,
        SECRET_KEY=secrets.token_urlsafe(32),
        ALLOWED_HOSTS=["127.0.0.1"],
        ROOT_URLCONF="op_site",
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(Path(spec["dir"]) / "op.sqlite3")}},
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                        "oauth2_provider", "oidc_provider"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "OPTIONS": {
            "context_processors": ["django.template.context_processors.request",
                                   "django.contrib.auth.context_processors.auth"],
            "loaders": [("django.template.loaders.locmem.Loader", {"registration/login.html": LOGIN_TEMPLATE}),
                        "django.template.loaders.app_directories.Loader"]}}],
        # A test site: the fast hasher (django-oauth-toolkit also hashes client secrets with it).
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        LOGIN_URL="/accounts/login/",
        USE_TZ=True,
        # Tables made straight from the models: running the apps' migrations takes 8 s here, this 0.4 s.
        MIGRATION_MODULES={app: None for app in ("auth", "contenttypes", "sessions", "oauth2_provider", "oidc_provider")},
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        OAUTH2_PROVIDER={
            "OIDC_ENABLED": True,
            "OIDC_ISS_ENDPOINT": f"{site}/o",
            "OIDC_RSA_PRIVATE_KEY": rsa_pem(),
            "SCOPES": {"openid": "OpenID Connect", "email": "Your email address", "profile": "Your profile"},
            "DEFAULT_SCOPES": ["openid"],
            "ACCESS_TOKEN_EXPIRE_SECONDS": spec["token_ttl"],
            "OAUTH2_VALIDATOR_CLASS": "op_site.EmailValidator",
            **spec.get("dot_settings", {}),
        },
        SITE_URL=site,
        OIDC_TOKEN_EXPIRE=spec["token_ttl"],
        OIDC_GRANT_TYPE_PASSWORD_ENABLE=True,
        OIDC_USERINFO="op_site.userinfo",
        OIDC_IDTOKEN_INCLUDE_CLAIMS=True,
        LOGGING={"version": 1, "disable_existing_loggers": False,
                 "handlers": {"stderr": {"class": "logging.StreamHandler"}},
                 "loggers": {"django": {"handlers": ["stderr"], "level": "INFO"}}},
    )


def provision(spec):
    from django.contrib.auth.models import User
    from oauth2_provider.models import Application
    from oidc_provider.models import Client, ResponseType, RSAKey

    for name, user in spec["users"].items():
        User.objects.create_user(name, email=user["email"], password=user["password"],
                                 first_name=user.get("first_name", ""), last_name=user.get("last_name", ""))
    for client in spec["dot"]:
        Application.objects.create(
            name=client["client_id"], client_id=client["client_id"], client_secret=client["client_secret"],
            client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=client["grant"],
            redirect_uris=client.get("redirect_uri", ""), algorithm=Application.RS256_ALGORITHM,
            skip_authorization=False)
    RSAKey.objects.create(key=rsa_pem())
    code = ResponseType.objects.create(value="code", description="code (Authorization Code Flow)")  # a data migration's row
    for spec_client in spec["op"]:
        client = Client.objects.create(
            name=spec_client["client_id"], client_id=spec_client["client_id"],
            client_secret=spec_client["client_secret"], client_type="confidential", jwt_alg="RS256",
            require_consent=True, reuse_consent=False, _redirect_uris=spec_client.get("redirect_uri", ""),
            _scope="openid profile email offline_access")
        client.response_types.add(code)


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    configure(spec)
    import django
    from django.core.management import call_command
    from django.core.servers.basehttp import run
    from django.core.wsgi import get_wsgi_application

    django.setup()
    call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)
    provision(spec)
    run("127.0.0.1", spec["port"], get_wsgi_application(), threading=True)


if __name__ == "__main__":
    main()
