"""A small order workflow: reserve stock, wait for a person's approval, ship.

Each activity appends a line to the file named by ORDERS_LEDGER, so a test can count how
often each one really ran (a crash must not make the reservation happen twice)."""

import os

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


def _record(line: str) -> None:
    ledger = os.environ.get("ORDERS_LEDGER")
    if ledger:
        with open(ledger, "a") as f:
            f.write(line + "\n")


@app.orchestration_trigger(context_name="context")
def process_order(context: df.DurableOrchestrationContext):
    order = context.get_input()
    reservation = yield context.call_activity("reserve", order)
    context.set_custom_status("awaiting approval")
    approval = yield context.wait_for_external_event("approved")
    context.set_custom_status("shipping")
    tracking = yield context.call_activity("ship", {"order": order, "reservation": reservation})
    return {"reservation": reservation, "approved_by": approval["by"], "tracking": tracking}


@app.activity_trigger(input_name="order")
def reserve(order: dict) -> str:
    _record(f"reserve:{order['item']}")
    return f"R-{order['item']}-{order['qty']}"


@app.activity_trigger(input_name="shipment")
def ship(shipment: dict) -> str:
    _record(f"ship:{shipment['order']['item']}")
    return "T-" + shipment["reservation"]
