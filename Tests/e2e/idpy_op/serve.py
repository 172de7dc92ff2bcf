"""idpyoidc 5.0.0 (the idpy project's OpenID Connect provider) on 127.0.0.1, for msso's interop
tests: its library with a small Flask front, after its example/flask_op (Apache 2.0).

    python serve.py SPEC.json

SPEC: {"dir", "port", "token_ttl" (access tokens, seconds), "users": {name: {password, email,
first_name, last_name}}, "clients": [{client_id, client_secret, redirect_uri}]}. Starts from scratch
in DIR (keys, templates, password file), then serves until killed; requests are logged to stderr.

What it is, as configured here: issuer http://127.0.0.1:PORT (no path); a login page of its own
(UserPassJinja2) and no consent page; PKCE S256 required (its add-on); refresh tokens only for
scope offline_access, which it accepts only with prompt=consent; no revocation endpoint; the
password grant (its ResourceOwnerPasswordCredentials helper) reads client_secret from the body only
and issues an access token alone. ID tokens carry the claims of the scopes granted (profile: name).

RFC 8693 token exchange (grant_type urn:ietf:params:oauth:grant-type:token-exchange), every client:
subject_token_type ...:access_token or ...:refresh_token, requested_token_type ...:access_token
(default) or ...:refresh_token; `resource` limited to SPEC's "exchange": {"resource": [...]} and
`audience` to its "audience" list (its policy function validate_token_exchange_policy). The token
it mints has aud = the audience values, plus the resource values only beside an audience (resource
alone is checked, then dropped), and expires with its subject token. An RFC 7662 introspection
endpoint (/introspection, any client, any token: its audience restriction off) shows a token's aud
and scope. Facts: Tests/e2e/test_provider_minting.py.
"""
import json
import secrets
import sys
import traceback
from pathlib import Path

from flask import Flask, make_response, redirect, request
from idpyoidc.message.oauth2 import ResponseMessage
from idpyoidc.message.oidc import AccessTokenRequest, AuthorizationRequest
from idpyoidc.server import Server
from idpyoidc.server.configure import OPConfiguration
from idpyoidc.server.exception import ClientAuthenticationError, FailedAuthentication
from idpyoidc.server.oauth2.add_on import pkce
from idpyoidc.server.oidc.token import Token
from idpyoidc.server.user_authn.authn_context import INTERNETPROTOCOLPASSWORD

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
REFRESH_TOKEN = "urn:ietf:params:oauth:token-type:refresh_token"

LOGIN_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Please log in</title></head><body>
<h1>{{ page_header }}</h1>
<form action="{{ action }}" method="post"><input type="hidden" name="token" value="{{ token }}">
<label>{{ user_label }} <input id="username" name="username" autofocus></label>
<label>{{ passwd_label }} <input id="password" name="password" type="password"></label>
<input id="sign-in" type="submit" value="{{ submit_btn }}">
</form></body></html>
"""


def configuration(spec, directory: Path):
    passwords = {"class": "idpyoidc.server.util.JSONDictDB", "kwargs": {"filename": str(directory / "passwd.json")}}
    exchange = spec.get("exchange", {})
    users = {name: {"sub": f"{name}-{secrets.token_hex(4)}", "email": user["email"],
                    "name": f"{user.get('first_name', '')} {user.get('last_name', '')}".strip()}
             for name, user in spec["users"].items()}
    return {
        "issuer": f"http://127.0.0.1:{spec['port']}",
        "httpc_params": {"verify": False},
        "keys": {"private_path": str(directory / "jwks.json"), "key_defs": [{"type": "RSA", "use": ["sig"]}],
                 "read_only": False, "uri_path": "jwks"},
        "template_dir": str(directory / "templates"),
        "token_handler_args": {
            "jwks_def": {"private_path": str(directory / "token_jwks.json"), "read_only": False,
                         "key_defs": [{"type": "oct", "bytes": 24, "use": ["enc"], "kid": "code"}]},
            "code": {"kwargs": {"lifetime": 600}},
            "token": {"kwargs": {"lifetime": spec["token_ttl"]}},  # opaque (its JWT tokens want an EC key)
            "refresh": {"kwargs": {"lifetime": 86400}},
            "id_token": {"class": "idpyoidc.server.token.id_token.IDToken", "kwargs": {"add_claims_by_scope": True}},
        },
        "endpoint": {
            "provider_config": {"path": ".well-known/openid-configuration",
                                "class": "idpyoidc.server.oidc.provider_config.ProviderConfiguration", "kwargs": {}},
            "authorization": {"path": "authorization", "class": "idpyoidc.server.oidc.authorization.Authorization",
                              "kwargs": {"response_types_supported": ["code"], "response_modes_supported": ["query"]}},
            "token": {"path": "token", "class": "idpyoidc.server.oidc.token.Token", "kwargs": {
                "client_authn_method": ["client_secret_post", "client_secret_basic"],
                "grant_types_helpers": {
                    "authorization_code": {"class": "idpyoidc.server.oidc.token_helper.access_token.AccessTokenHelper"},
                    "refresh_token": {"class": "idpyoidc.server.oidc.token_helper.refresh_token.RefreshTokenHelper"},
                    "password": {"class": "idpyoidc.server.oauth2.token_helper.resource_owner_password_credentials"
                                          ".ResourceOwnerPasswordCredentials", "kwargs": {"db": passwords}},
                    # Its configuration is the helper's kwargs, all of it (without kwargs the helper
                    # gets {} and raises ImproperlyConfigured on every exchange).
                    TOKEN_EXCHANGE: {"class": "idpyoidc.server.oidc.token_helper.token_exchange.TokenExchangeHelper",
                                     "kwargs": {
                        "subject_token_types_supported": [ACCESS_TOKEN, REFRESH_TOKEN],
                        "requested_token_types_supported": [ACCESS_TOKEN, REFRESH_TOKEN],
                        "default_requested_token_type": ACCESS_TOKEN,
                        "policy": {"": {"function": "idpyoidc.server.oauth2.token_helper.validate_token_exchange_policy",
                                        "kwargs": {"resource": exchange.get("resource", []),
                                                   "audience": exchange.get("audience", [])}}}}},
                }}},
            "introspection": {"path": "introspection", "class": "idpyoidc.server.oauth2.introspection.Introspection",
                              "kwargs": {"client_authn_method": ["client_secret_post", "client_secret_basic"],
                                         "enforce_audience_restriction": False}},
            "userinfo": {"path": "userinfo", "class": "idpyoidc.server.oidc.userinfo.UserInfo", "kwargs": {}},
        },
        "authentication": {"user": {
            "acr": INTERNETPROTOCOLPASSWORD, "class": "idpyoidc.server.user_authn.user.UserPassJinja2",
            "kwargs": {"verify_endpoint": "/verify/user", "template": "user_pass.jinja2", "db": passwords,
                       "page_header": "Sign in", "submit_btn": "Sign in", "user_label": "Username",
                       "passwd_label": "Password"}}},
        "userinfo": {"class": "idpyoidc.server.user_info.UserInfo", "kwargs": {"db": users}},
        "authz": {"class": "idpyoidc.server.authz.AuthzHandling", "kwargs": {"grant_config": {
            "usage_rules": {
                "authorization_code": {"supports_minting": ["access_token", "refresh_token", "id_token"], "max_usage": 1},
                # An access token may be the subject of an exchange; its lifetime stays the token
                # handler's (with rules and no expires_in, it would have none).
                "access_token": {"supports_minting": ["access_token"], "expires_in": spec["token_ttl"]},
                "refresh_token": {"supports_minting": ["access_token", "refresh_token", "id_token"]}},
            "expires_in": 43200}}},
        "add_on": {"pkce": {"function": "idpyoidc.server.oauth2.add_on.pkce.add_support",
                            "kwargs": {"essential": True, "code_challenge_method": "S256"}}},
        "cookie_handler": {"class": "idpyoidc.server.cookie_handler.CookieHandler", "kwargs": {
            "keys": {"private_path": str(directory / "cookie_jwks.json"), "read_only": False,
                     "key_defs": [{"type": "OCT", "use": ["enc"], "kid": "enc"}, {"type": "OCT", "use": ["sig"], "kid": "sig"}]},
            "name": {"session": "oidc_op", "register": "oidc_op_rp", "session_management": "sman"}}},
    }


def make_server(spec):
    directory = Path(spec["dir"])
    (directory / "templates").mkdir(exist_ok=True)
    (directory / "templates" / "user_pass.jinja2").write_text(LOGIN_TEMPLATE)
    (directory / "passwd.json").write_text(json.dumps({name: user["password"] for name, user in spec["users"].items()}))
    server = Server(OPConfiguration(conf=configuration(spec, directory), base_path=str(directory)), cwd=str(directory))
    # Its PKCE add-on looks for a code in every token request, and so refuses the password grant
    # ("Unknown access grant"): its check, for the authorization code grant only.
    token = server.get_endpoint("token")

    def code_grant_only(check):
        def checked(req, client_id, context, **kwargs):
            return check(req, client_id, context, **kwargs) if req.get("grant_type") == "authorization_code" else req
        return checked

    token.post_parse_request = [code_grant_only(each) if each is pkce.post_token_parse else each
                                for each in token.post_parse_request]
    for client in spec["clients"]:
        server.context.cdb[client["client_id"]] = {
            "client_id": client["client_id"], "client_secret": client["client_secret"],
            "redirect_uris": [(client["redirect_uri"], {})], "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "password", TOKEN_EXCHANGE],
            "allowed_scopes": ["openid", "profile", "email", "offline_access"], "client_salt": secrets.token_hex(8)}
    return server


def make_app(server):
    app = Flask("idpy_op")

    def respond(endpoint, req_args, error="", **args):
        info = endpoint.do_response(request=req_args, error=error, **args)
        if info.get("response_placement", endpoint.response_placement) == "body":
            response = make_response(info["response"], info.get("response_code", 400 if error else 200))
        else:
            response = redirect(info["response"])
        for key, value in info["http_headers"]:
            response.headers[key] = value
        cookies = info.get("cookie", [])
        for cookie in [cookies] if isinstance(cookies, dict) else cookies:
            options = dict({k: v for k, v in cookie.items() if k != "name"}, path="/")
            options.setdefault("samesite", "Lax")
            response.set_cookie(cookie["name"], **options)
        return response

    def refusal(error, description, status=400):
        return make_response(ResponseMessage(error=error, error_description=description).to_json(), status,
                             {"Content-Type": "application/json"})

    def serve(endpoint):
        http_info = {"headers": {k: v for k, v in request.headers.items(lower=True) if k not in ("cookie", "user-agent")},
                     "method": request.method, "url": request.url,
                     "cookie": [{"name": k, "value": v} for k, v in request.cookies.items()]}
        # A repeated parameter (RFC 8707's resource, RFC 8693's audience) as a list: to_dict() keeps
        # the first value alone.
        raw = {key: values[0] if len(values) == 1 else values
               for key, values in (request.args if request.method == "GET" else request.form).lists()}
        try:
            parsed = endpoint.parse_request(raw, http_info=http_info)
        except ClientAuthenticationError as error:  # RFC 6749 §5.2 (its example says invalid_request)
            return refusal("invalid_client", str(error), 401)
        except Exception as error:  # what its example does: the library raises for a bad request
            return refusal("invalid_request", str(error))
        if isinstance(parsed, ResponseMessage) and "error" in parsed:
            return make_response(parsed.to_json(), 401 if parsed["error"] == "invalid_client" else 400,
                                 {"Content-Type": "application/json"})
        try:
            args = endpoint.process_request(AccessTokenRequest(**parsed) if isinstance(endpoint, Token) else parsed,
                                            http_info=http_info)
        except Exception as error:
            traceback.print_exc()
            return refusal("invalid_request", str(error))
        if "redirect_location" in args:
            return redirect(args["redirect_location"])
        if "http_response" in args:
            return make_response(args["http_response"], 200)
        return respond(endpoint, parsed, **args)

    @app.route("/.well-known/openid-configuration")
    def discovery():
        return serve(server.get_endpoint("provider_config"))

    @app.route("/jwks")
    def jwks():
        return server.context.keyjar.export_jwks()

    @app.route("/authorization")
    def authorization():
        return serve(server.get_endpoint("authorization"))

    @app.route("/token", methods=["POST"])
    def token():
        return serve(server.get_endpoint("token"))

    @app.route("/introspection", methods=["POST"])
    def introspection():
        return serve(server.get_endpoint("introspection"))

    @app.route("/userinfo", methods=["GET", "POST"])
    def userinfo():
        return serve(server.get_endpoint("userinfo"))

    @app.route("/verify/user", methods=["POST"])
    def verify_user():
        method = server.context.authn_broker.get_method_by_id("user")
        form = request.form.to_dict()
        try:
            username = method.verify(**form)
        except FailedAuthentication:
            return make_response("Authentication failed", 403)
        auth_args = method.unpack_token(form["token"])
        authz_request = AuthorizationRequest().from_urlencoded(auth_args["query"])
        endpoint = server.get_endpoint("authorization")
        session_id = endpoint.create_session(authz_request, username, auth_args["authn_class_ref"], auth_args["iat"],
                                             method)
        args = endpoint.authz_part2(request=authz_request, session_id=session_id)
        if isinstance(args, ResponseMessage) and "error" in args:
            return make_response(args.to_json(), 400)
        return respond(endpoint, request, **args)

    return app


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    make_app(make_server(spec)).run(host="127.0.0.1", port=spec["port"], threaded=True)


if __name__ == "__main__":
    main()
