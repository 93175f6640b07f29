"""Microsoft's Python v2 quickstarts for the Storage extension, recreated from their documented
behaviour: the "connect to Azure Storage" quickstart (an HTTP function that greets ``name``,
from the query or the JSON body, and writes it to the queue ``outqueue``) and Core Tools' blob
trigger template (logs the name and size of each blob in ``samples-workitems``). Both use the
app's own storage, ``AzureWebJobsStorage`` - ``UseDevelopmentStorage=true`` locally."""

import logging

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="http_trigger")
@app.queue_output(arg_name="msg", queue_name="outqueue", connection="AzureWebJobsStorage")
def http_trigger(req: func.HttpRequest, msg: func.Out[func.QueueMessage]) -> func.HttpResponse:
    name = req.params.get("name")
    if not name:
        try:
            name = req.get_json().get("name")
        except ValueError:
            name = None
    if not name:
        return func.HttpResponse(
            "Pass a name in the query string or in the request body.", status_code=200
        )
    msg.set(name)
    return func.HttpResponse(f"Hello, {name}. This HTTP triggered function executed successfully.")


@app.blob_trigger(
    arg_name="myblob", path="samples-workitems/{name}", connection="AzureWebJobsStorage"
)
def blob_trigger(myblob: func.InputStream) -> None:
    logging.info(  # noqa: LOG015 - as the template: the worker forwards the root logger
        "Python blob trigger function processed blob Name: %s Blob Size: %s bytes",
        myblob.name,
        myblob.length,
    )
