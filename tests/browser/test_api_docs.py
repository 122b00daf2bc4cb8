"""The API's docs page works in a browser under the site's Content-Security-Policy, loads
nothing from another host, and calls the API with a token ("Try it out")."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def key(user) -> str:
    """Made before the browser starts: the ORM refuses to run beside Playwright's loop."""
    return Token.objects.create(user=user).key


def test_the_docs_page_lists_the_api_and_calls_it_with_a_token(web_server, key, page):
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{web_server}/api/v1/docs/")
    expect(page.locator(".info .title")).to_contain_text("workbench API")
    models = page.locator("#operations-models-models_list")
    expect(models).to_be_visible()
    assert page.locator(".opblock").count() >= 20

    page.click("button.authorize")
    page.locator(".auth-container", has_text="tokenAuth").locator("input").fill(f"Token {key}")
    page.locator(".auth-container", has_text="tokenAuth").locator("button.authorize").click()
    page.click("button.btn-done")
    models.locator(".opblock-summary").click()
    models.locator("button.try-out__btn").click()
    models.locator("button.execute").click()
    expect(models.locator(".live-responses-table tbody .response-col_status")).to_have_text("200")
    expect(models.locator(".live-responses-table")).to_contain_text('"results"')

    screenshot(page, "api-docs")
    elsewhere = [url for url in requested if not url.startswith(web_server)]
    assert not elsewhere, f"the docs page fetched from another host: {elsewhere}"
