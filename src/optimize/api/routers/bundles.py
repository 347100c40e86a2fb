"""Registry bundles: list, get a version, versions, aliases, registering, the archive route that takes a
version's ZIP bytes (streamed, checked, stored under their sha256), and checking a version against a dataset."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from optimize.api.alias_routes import add_alias_routes
from optimize.api.bodies import streamed_body
from optimize.api.deps import DeploymentDep, RegistryDep
from optimize.api.lanes import in_user_code_pool
from optimize.api.streamed import declared_size, put_answer
from optimize.evaluation import service as evaluations
from optimize.registry import bundle_checks, bundles
from optimize.registry.nouns import BUNDLES
from optimize.schemas.bundles import (
    BundleArchive,
    BundleCheck,
    BundleCheckRequest,
    BundleList,
    BundleRegister,
    BundleVersionDetail,
    BundleVersionList,
    RegisteredBundle,
)
from optimize.schemas.evaluations import EvaluationRequest

router = APIRouter(prefix="/v1/registry/bundles", tags=["registry"])
add_alias_routes(router, BUNDLES)  # GET and PUT …/{namespace}/{name}/aliases/{alias}


@router.get("", response_model=BundleList)
def list_bundles(
    registry: RegistryDep,
    namespace: str | None = Query(None, description="Only this namespace (archived or not)"),
    archived: bool = Query(False, description="Include archived namespaces"),
) -> BundleList:
    return BundleList(bundles=bundles.list_bundles(registry.store, namespace, archived))


@router.get("/{namespace}/{name}", response_model=BundleVersionDetail)
def get_bundle(namespace: str, name: str, registry: RegistryDep) -> BundleVersionDetail:
    """The newest version, with its members."""
    return bundles.read_version(registry, namespace, name, "latest")


@router.get("/{namespace}/{name}/versions", response_model=BundleVersionList)
def list_versions(namespace: str, name: str, registry: RegistryDep) -> BundleVersionList:
    return BundleVersionList(versions=bundles.list_versions(registry.store, namespace, name))


@router.post("/{namespace}/{name}/versions", response_model=RegisteredBundle)
def register_version(namespace: str, name: str, body: BundleRegister, registry: RegistryDep) -> RegisteredBundle:
    """Register an archive the registry holds (sent with PUT …/archives/{sha256}) as a version of NS/NAME, or answer
    the version the same bytes already are (`created: false`). The bundle and namespace are created on first use."""
    return bundles.register_version(registry, namespace, name, body.digest, body.alias)


@router.post("/{namespace}/{name}/check", response_model=BundleCheck)
async def check_bundle(namespace: str, name: str, body: BundleCheckRequest, registry: RegistryDep,
                       deployment: DeploymentDep) -> BundleCheck:
    """Check a bundle version's function against a chat dataset version, synchronously and within a bound: it
    imports (in the bundle's limited process), the row fields its module declares (`FIELDS = [...]`) are in every
    row, and the first `samples` rows' own final answers are scored (mean, spread, unscored, errors with their
    lines). Refused naming the module when it does not import, the lines lacking a declared field, a preference
    dataset. With `model`, a sampling evaluation of that model on the same first rows starts too, graded by the
    function (`sampling.evaluationId`): its report gives the sampled answers' spread and `zeroVarianceShare`.
    The check runs in the server's pool for user code: one more than the token's or the project's checks in flight
    allow is refused 429, naming the limit."""
    return await in_user_code_pool(f"bundle check {namespace}/{name}".lower(), _check, namespace, name, body,
                                   registry, deployment,
                                   project=body.project if body.model is not None else None)


def _check(namespace: str, name: str, body: BundleCheckRequest, registry, deployment) -> BundleCheck:
    """The check and its sampling evaluation, on a worker of the user-code pool."""
    report = bundle_checks.check_bundle(registry, namespace, name, dataset=body.dataset, selector=body.selector,
                                        function=body.function, samples=body.samples, model=body.model,
                                        time_limit_s=body.time_limit_seconds)
    if body.model is not None:
        evaluation = evaluations.start(deployment, EvaluationRequest.parse({
            "model": body.model, "dataset": report.dataset, "project": body.project,
            "grader": f"bundle:{report.bundle}#{report.function}", "generations": body.generations,
            "temperature": body.temperature, "rows": body.samples, "maxNewTokens": body.max_new_tokens}))
        report = report.extended(sampling={"evaluationId": evaluation.evaluation_id, "model": evaluation.model,
                                           "generations": body.generations, "temperature": body.temperature,
                                           "rows": evaluation.progress.total})
    return report


@router.get("/{namespace}/{name}/versions/{selector}", response_model=BundleVersionDetail)
def get_version(namespace: str, name: str, selector: str, registry: RegistryDep) -> BundleVersionDetail:
    """The version a selector names (vN, an alias, latest or sha256:HEX), with its members."""
    return bundles.read_version(registry, namespace, name, selector)


@router.get("/{namespace}/{name}/archives/{sha256}", response_model=BundleArchive)
def get_archive(namespace: str, name: str, sha256: str, registry: RegistryDep) -> BundleArchive:
    """Whether the registry holds the archive's bytes: when it does, registering them sends none."""
    return bundles.archive_state(registry, namespace, name, sha256)


@router.put("/{namespace}/{name}/archives/{sha256}", response_model=BundleArchive, status_code=201,
            response_description="The archive was received, checked and stored",
            responses={200: {"model": BundleArchive, "description": "The registry held the archive already"}},
            openapi_extra=streamed_body("application/zip", "The bundle's ZIP archive, exactly the bytes whose sha256 "
                                        "the path names; not read when the registry holds them already"))
async def put_archive(namespace: str, name: str, sha256: str, request: Request, registry: RegistryDep
                      ) -> JSONResponse:
    """Send a bundle's archive before registering it. Refused, naming the member: not a ZIP, an absolute path or
    `..`, a symbolic link or special file, an encrypted member, more members or bytes than the limits, no Python
    module."""
    return await put_answer(request, await run_in_threadpool(
        bundles.open_archive, registry, namespace, name, sha256, declared_size(request)))
