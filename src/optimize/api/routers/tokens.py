"""API tokens: `POST|GET /v1/auth/tokens`, `DELETE /v1/auth/tokens/{id}` (administrators), `GET /v1/auth/whoami`."""

from __future__ import annotations

from fastapi import APIRouter, Request

from optimize.api.auth import caller_of
from optimize.api.deps import DeploymentDep
from optimize.auth import tokens
from optimize.schemas.auth import IssuedToken, Token, TokenCreate, TokenList, WhoAmI

router = APIRouter(prefix="/v1/auth", tags=["auth"])


@router.post("/tokens", response_model=IssuedToken, status_code=201)
def create_token(body: TokenCreate, request: Request, deployment: DeploymentDep) -> IssuedToken:
    token, record = tokens.issue(deployment.store, body.name, tokens.parse_role(body.role), projects=body.projects,
                                 namespaces=body.namespaces, created_by=caller_of(request).token_id)
    return record.extended(IssuedToken, token=token)


@router.get("/tokens", response_model=TokenList)
def list_tokens(deployment: DeploymentDep, revoked: bool = False) -> TokenList:
    return TokenList(tokens=tokens.list_tokens(deployment.store, include_revoked=revoked))


@router.delete("/tokens/{token_id}", response_model=Token)
def revoke_token(token_id: str, request: Request, deployment: DeploymentDep) -> Token:
    return tokens.revoke(deployment.store, token_id, caller_of(request))


@router.get("/whoami", response_model=WhoAmI)
def whoami(request: Request) -> WhoAmI:
    caller = caller_of(request)
    return WhoAmI(token_id=caller.token_id, name=caller.name, role=caller.role.value,
                  projects=list(caller.projects) if caller.projects else None,
                  namespaces=list(caller.namespaces) if caller.namespaces else None)
